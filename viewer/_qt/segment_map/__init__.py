"""The segment map: every segment a row drawn to scale, blocks coloured by state.

Rendering never creates one QGraphicsItem per block: the layout and its level of
detail are numpy columns in the model (:mod:`vramscope.viewer.model.view.map_layout`);
``item`` draws each colour of the draw list as one QPainterPath built from numpy,
``axes`` labels rows and offsets, ``panel`` is the widget with its controls;
``category_overlay`` repaints the live blocks by memory category.

May import: ``..widgets``, the model.  Never a feature package: the main window, the
Diff window and the categories use the map.
"""

from ...model.view.map_layout import (  # noqa: F401  (the map's public names, in one place)
    BAR_TOP,
    SORT_ADDRESS,
    SORT_FREE,
    SORT_SIZE,
    LodRects,
    MapLayout,
    lod_rects,
)
from ..widgets.plotting import rects_path, segments_path, short_bytes  # noqa: F401
from .axes import BytesAxis, MapViewBox, SegmentAxis  # noqa: F401
from .item import SegmentMapItem, block_rect  # noqa: F401
from .panel import SegmentMapView  # noqa: F401
