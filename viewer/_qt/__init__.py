"""Qt adapters of vramscope's model: the desktop viewer (PySide6 + pyqtgraph).

Nothing here computes memory figures: widgets only display what
:mod:`vramscope.viewer.model` returns.  Import this package only from the GUI
entry point (``vramscope.viewer.commands.gui``): it imports Qt.
"""
