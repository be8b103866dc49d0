"""``python -m hw.build``: the user's command; the tool itself is ``flow.build`` (the flow layer
sits above the hardware and the simulation layer, so nothing in ``hw`` imports it)."""

if __name__ == "__main__":
    import sys

    from flow.build import main

    sys.exit(main())
