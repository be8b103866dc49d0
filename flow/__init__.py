"""Tools above the hardware and simulation layers: the board build flow (``flow.build``,
``python -m hw.build``), the generated reports (``flow.report``, ``make report``) and the Yosys
resource estimates (``flow.synth``, ``make synth``). Imports point one way: ``golden`` <- ``hw``
<- ``sim`` <- ``flow``."""
