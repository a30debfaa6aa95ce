"""What the window shows, without Qt: the views subscribe to these and only draw.

* :mod:`.document` - :class:`Document`: one loaded snapshot and its replays;
* :mod:`.view_state` - :class:`ViewState`: device, instant, selection, highlight
  (evented fields that document themselves);
* :mod:`.evented` - the small event/field machinery the view state is made of;
* :mod:`.exactness` - whether the figures shown at an instant are exact, and why not;
* :mod:`.figure_words` - the figures' titles and values in words, an OOM's place;
* :mod:`.category_view` - the categories at the cursor, for the legend and panels;
* :mod:`.map_layout` - the segment map's geometry (rows, widths, gaps);
* :mod:`.curve_lod` - curves reduced to the pixels they are drawn on (one decimator:
  maxima, or minima and maxima);
* :mod:`.stacking` - stacked category curves;
* :mod:`.stack_query` - what is alive at one moment, largest first with its stacks (the
  MCP tool ``stack_at``);
* :mod:`.annotations` - ``record_function`` ranges and labels placed so they never overlap.

Views that only draw: everything a window shows is one :class:`ViewState` - the
document, the selection (device, pool, stream, segment kind), the cursor, the picked
block or allocation and the highlight masks - with the logic that decides them (which
moment a file opens at, how picks carry over to a newer document).  It emits events
(``document``, ``trace``, ``cursor``, ``moment``, ``selection``, ``selected``,
``highlight``; :meth:`ViewState.batch` coalesces compound changes); each Qt widget
subscribes and only draws.  Level-of-detail code is model code too.

May import: every layer below (:mod:`..remedies`, :mod:`..categories`,
:mod:`..whatif`, :mod:`..analysis`, :mod:`..replay`, :mod:`..io`, :mod:`..core`);
never :mod:`..reports`.
"""
