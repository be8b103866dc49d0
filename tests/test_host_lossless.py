"""Lossless end to end: tree speculative decoding through host.Engine generates tokens with
the target model's distribution (greedy: its argmax), whatever the draft model proposes.

The synthetic target is a bigram model, so the distribution of every generated token given
the token before it is known exactly; the transitions' counts are compared with it by a
chi-square test (fixed seeds, significance 1e-3: a pass is deterministic, and a wrong
distribution, the draft model's, is rejected by a wide margin)."""

import math

import numpy as np
import pytest

import host

V = 8
BATCH = 8
SIGNIFICANCE = 1e-3


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for a chi-square variable of ``df`` (integer) degrees of freedom: the
    regularized upper incomplete gamma function Q(df/2, x/2) in closed form."""
    if x <= 0:
        return 1.0
    y = x / 2
    if df % 2 == 0:
        term = total = math.exp(-y)
        for i in range(1, df // 2):
            term *= y / i
            total += term
        return min(total, 1.0)
    total = math.erfc(math.sqrt(y))
    term = math.exp(-y) * math.sqrt(y) / math.gamma(1.5)
    for i in range((df - 1) // 2):
        total += term
        term *= y / (i + 1.5)
    return min(total, 1.0)


def test_chi2_sf_matches_tabulated_critical_values():
    for x, df in ((3.841, 1), (5.991, 2), (7.815, 3), (11.070, 5), (18.307, 10),
                  (67.505, 50)):
        assert chi2_sf(x, df) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(0.0, 4) == 1.0


def transitions(run) -> np.ndarray:
    """Counts [prev, next] over every request's stream (prompt then generated tokens)."""
    counts = np.zeros((V, V), np.int64)
    for prompt, tokens in zip(run.prompts, run.tokens, strict=True):
        stream = [prompt, *tokens]
        for prev, nxt in zip(stream, stream[1:], strict=False):
            counts[prev, nxt] += 1
    return counts


def chi_square(counts, distribution) -> tuple[float, int]:
    """The statistic and degrees of freedom of the transitions against
    ``distribution(prev)``; per row, cells expected below 5 are pooled into one."""
    statistic, df = 0.0, 0
    for prev in range(V):
        total = counts[prev].sum()
        if not total:
            continue
        p = distribution(prev)
        assert counts[prev][p == 0].sum() == 0, f"a token of probability 0 after {prev}"
        expected, observed = total * p[p > 0], counts[prev][p > 0]
        small = expected < 5
        if small.sum() > 0:
            expected = np.append(expected[~small], expected[small].sum())
            observed = np.append(observed[~small], observed[small].sum())
        statistic += float(((observed - expected) ** 2 / expected).sum())
        df += len(expected) - 1
    return statistic, df


def decode(rounds, *, seed=5, tree="small", **settings):
    models = host.BigramModels(V, seed=seed, agreement=0.5, sharpness=1.0)
    engine = host.Engine(host.TREES[tree].round_config(BATCH), vocab_size=V, seed=seed,
                         context_len=rounds * (host.TREES[tree].depth + 1) + 80)
    prompts = np.random.default_rng(seed).integers(0, V, BATCH).tolist()
    return models, host.decode(engine, models, prompts, rounds, **settings)


def test_greedy_generates_the_targets_argmax():
    models, run = decode(40, temperature=0.0)
    for prompt, tokens in zip(run.prompts, run.tokens, strict=True):
        stream = [prompt, *tokens]
        assert all(nxt == int(np.argmax(models.target_logits[prev]))
                   for prev, nxt in zip(stream, stream[1:], strict=False))
    assert run.metrics.tokens == sum(map(len, run.tokens)) >= 40 * BATCH
    assert run.metrics.accepted > 0  # the draft helped


@pytest.mark.parametrize("name, settings", [
    ("temperature", {"temperature": 1.0}),
    ("temperature-lfsr", {"temperature": 0.7, "lfsr": True}),
    ("top-k", {"temperature": 0.8, "top_k": 3}),
    ("top-p", {"temperature": 1.2, "top_p": 0.7}),
])
def test_sampling_follows_the_targets_distribution(name, settings):
    models, run = decode(150, **settings)
    counts = transitions(run)
    assert counts.sum() == run.metrics.tokens > 2000

    def target(prev):
        return models.next_token_distribution(prev, settings["temperature"],
                                              settings.get("top_k", 0),
                                              settings.get("top_p", 1.0))

    statistic, df = chi_square(counts, target)
    assert chi2_sf(statistic, df) > SIGNIFICANCE, (name, statistic, df)
    if name == "temperature":  # the test's power: the draft's distribution is rejected
        def draft(prev):
            logits = models.draft_logits[prev].astype(np.float64)
            p = np.exp(logits - logits.max())
            return p / p.sum()

        statistic, df = chi_square(counts, draft)
        assert chi2_sf(statistic, df) < 1e-6


def test_a_static_tree_is_lossless_too():
    models, run = decode(60, temperature=0.0, tree="serving",
                         widths=host.TREES["serving"].static_widths())
    for prompt, tokens in zip(run.prompts, run.tokens, strict=True):
        stream = [prompt, *tokens]
        assert all(nxt == int(np.argmax(models.target_logits[prev]))
                   for prev, nxt in zip(stream, stream[1:], strict=False))
