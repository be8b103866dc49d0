"""``python -m hw.report``: the user's command; the tool itself is ``flow.report`` (the flow layer
sits above the hardware and the simulation layer, so nothing in ``hw`` imports it)."""

if __name__ == "__main__":
    import sys

    from flow.report import main

    sys.exit(main())
