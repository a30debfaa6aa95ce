"""What the memory is, in the main window: the "What it is" tab (split at the cursor,
category timeline with iteration bands, Leaks view; ``panel``, ``category_timeline``,
``leaks_view``), its split bar and parts (``split_bar``), and
:class:`~.wiring.CategoriesWiring`, which connects a main window's views to the Qt-free
:class:`CategoryView` (colour by category, category filter, phase bands, the header's
split line).

May import: ``..widgets``, ``..timeline``, ``..segment_map``, the model.  Never
``..main_window`` (the window builds the wiring and hands itself over) nor another
feature package.
"""
