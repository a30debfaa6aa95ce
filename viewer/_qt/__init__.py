"""Qt adapters of vramscope's model: the desktop viewer (PySide6 + pyqtgraph).

Nothing here computes memory figures: widgets only display what
:mod:`vramscope.viewer.model` returns.  Import this package only from the GUI
entry point (``vramscope.viewer.commands.gui``): it imports Qt.

The packages, by feature (each ``__init__`` says what it may import):

* ``app`` - the QApplication, the headless screenshot, the composition root
  (it hands File > Attach to ``live``); ``diagnosis_shot`` - the README's picture of
  the Diagnosis panel over a main window; ``report_shot`` - ``vramscope report``, File >
  Export report in a window never shown.
* ``main_window/`` - the main window: header, selectors, Blocks table, call tree, time
  travel; its menus (declared as data), the load lifecycle, the exports.
* ``timeline/``, ``segment_map/`` - the two big views of the main window.
* ``categories/`` - what the memory is: the "What it is" tab, colours, phase bands, leaks.
* ``diagnosis/``, ``whatif/`` - the Diagnosis and What-if panels (a cancellable job each).
* ``compare/`` - the Diff window; ``ranks/`` - the Ranks window.
* ``live/`` - live attach: the controller feeding a main window, the poller, the attach
  dialog, the live curves and the NVML device panel.
* ``widgets/`` - building blocks more than one feature uses (jobs, the job panel, the
  loader, theme, settings, plotting, PNG, lazy tree, stack panel, category colours).

Below them all, ``widgets``; above, the features; ``live`` composes ``main_window``;
``app``, ``diagnosis_shot`` and ``report_shot`` compose everything.
"""

from .widgets.qt_import import import_pyqtgraph

# Before any module here imports pyqtgraph: its import then leaves PySide6's types to be
# built when first used (widgets/qt_import.py says why).
import_pyqtgraph()
