"""The timeline: memory over time, the stacked allocations and the time-travel cursor.

``panel`` is the widget (header, plot, cursor, curves at the plot's resolution via
:mod:`vramscope.viewer.model.view.curve_lod`); ``stacked`` the stacked allocations and their
hit-test; ``marks`` peaks, markers and annotation bands; ``items`` the graphics items;
``raster`` the stacked image; ``axes`` the axes and view box; ``overlay`` other panels'
predicted curves; ``notes`` annotations and untrusted stretches; ``phase_bands`` the
iterations' phases; ``constants`` the x modes, colours and action names.

May import: ``..widgets``, the model.  Never a feature package: the main window, the
categories, the Diagnosis panel and the live curves use the timeline.
"""

from .axes import BytesYAxis, TimelineViewBox, XAxis, event_tick_step  # noqa: F401
from .constants import CURVES, X_EVENTS, X_TIME, curve_colors, format_seconds  # noqa: F401
from .items import StackedItem, VerticalBandsItem  # noqa: F401
from .panel import TimelinePanel  # noqa: F401
from .raster import EventXs, band_color_index, band_rects, column_edges, stacked_raster  # noqa: F401
