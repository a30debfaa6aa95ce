"""The main window's menus as data: one table of entries per menu, built by one loop.

An :class:`Item` names its action's text, the window's slot it triggers (a dotted path
from the window: ``"jump_to_oom"``, ``"map.fit"``, ``"loading.open_dialog"``), its
shortcut and tooltip, whether it is checkable (and its exclusive group) and the window
attribute that keeps it.  :data:`SEPARATOR` draws a line; a :class:`Submenu` is filled by
a slot each time it is about to show.  Help > Keyboard shortcuts walks the menus built
here (``help_dialogs``), so a key bound here is listed there.  The categories wiring
adds its own entries to the View menu after these (``..categories.wiring``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from PySide6.QtGui import QAction, QActionGroup, QKeySequence

from ...model.view.map_layout import SORT_ADDRESS, SORT_FREE, SORT_SIZE
from ..widgets.actions import make_action

Key = str | QKeySequence.StandardKey | None


@dataclass(frozen=True)
class Item:
    """One action: ``text`` (with its mnemonic), ``slot`` (a dotted path from the window;
    ``args``: what it is called with), ``key`` (its shortcut), ``tip`` (tooltip and
    status tip), ``attr`` (the window attribute that keeps it; None: not kept),
    ``group`` (checkable, exclusive with the other actions of that group), ``checked``
    (at first), ``enabled`` (at first) and ``needs``: what it applies to, the window
    enables it while there is one (:data:`PAGE`, :data:`DOCUMENT`, :data:`TRACE`)."""

    text: str
    slot: str
    key: Key = None
    tip: str | None = None
    attr: str | None = None
    args: tuple = ()
    group: str | None = None
    checked: bool = False
    enabled: bool = True
    needs: str | None = None


@dataclass(frozen=True)
class Submenu:
    """A submenu kept as window attribute ``attr``, filled by ``fill`` (a dotted path
    from the window) once when built and again each time it is about to show."""

    text: str
    attr: str
    fill: str


SEPARATOR = None
# What an action applies to (Item.needs): a file's page of views (not the host memory
# shown in place of its GPUs: the same page), any document, a device's trace.
PAGE, DOCUMENT, TRACE = "page", "document", "trace"
Entry = Item | Submenu | None

MENUS: tuple[tuple[str, tuple[Entry, ...]], ...] = (
    (
        "&File",
        (
            Item(
                "&Open…",
                "loading.open_dialog",
                QKeySequence.StandardKey.Open,
                "Open a memory snapshot",
                "open_action",
            ),
            Submenu("Open &Recent", "recent_menu", "loading.fill_recent_menu"),
            Item(
                "Open re&mote…",
                "tools.open_remote",
                "Ctrl+Shift+O",
                "Open a snapshot on another machine through ssh: ssh://user@host/path",
                "open_remote_action",
            ),
            # Compare snapshots and ranks: separate windows over the model.
            Item(
                "&Compare with…",
                "tools.compare_dialog",
                tip="Compare this snapshot (A) with another (B): what grew, by allocation stack",
                attr="compare_action",
                needs=DOCUMENT,
            ),
            Item(
                "Open &directory of ranks…",
                "tools.open_ranks_dialog",
                tip="One row per rank of a torchrun capture directory, outlier ranks flagged",
                attr="ranks_action",
            ),
            # File > Attach... and Tools > What-if... / Diagnosis...: the actions are here
            # from the start, their modules (~10 ms of imports: the live client, the
            # simulator) load when first used, not with every window.
            Item(
                "&Attach to running process…",
                "tools.open_attach",
                "Ctrl+Shift+A",
                "Watch a running PyTorch process's GPU memory live, or save a snapshot from it",
                "attach_action",
            ),
            SEPARATOR,
            Item(
                "Export segment map as &PNG…",
                "exports.png_dialog",
                tip="Save the segment map as a PNG image",
                attr="export_png_action",
                needs=PAGE,
            ),
            Item(
                "Export segment map as &SVG…",
                "exports.svg_dialog",
                tip="Save the segment map as an SVG drawing",
                attr="export_svg_action",
                needs=PAGE,
            ),
            Item(
                "Export &report…",
                "exports.report_dialog",
                "Ctrl+E",
                "Save one self-contained HTML page to attach to a bug report: the figures, the "
                "OOM verdict, what the memory is, the remedies and images of the views",
                "export_report_action",
                needs=PAGE,
            ),
            SEPARATOR,
            Item("&Quit", "quit", QKeySequence.StandardKey.Quit, "Quit vramscope"),
        ),
    ),
    (
        "&Edit",
        (
            Item(
                "&Copy stack",
                "stack.copy",
                QKeySequence.StandardKey.Copy,
                "Copy the selected block's stack as text",
                "copy_stack_action",
            ),
            Item(
                "Copy segment &map image",
                "map.copy_image",
                "Ctrl+Shift+C",
                "Copy the segment map to the clipboard",
                "copy_map_action",
                needs=PAGE,
            ),
            Item(
                "&Search frames",
                "focus_filter",
                QKeySequence.StandardKey.Find,
                "Highlight and filter the allocations by stack text",
            ),
        ),
    ),
    (
        "&View",
        (
            Item(
                "&Fit segment map",
                "map.fit",
                "Ctrl+0",
                "Show every segment",
                "fit_action",
                needs=PAGE,
            ),
            Item(
                "&Readable rows",
                "map.home",
                "Ctrl+9",
                "Rows tall enough to read, from the top",
                "home_action",
            ),
            Item(
                "Zoom &in",
                "zoom",
                QKeySequence.StandardKey.ZoomIn,
                "Zoom the segment map in",
                args=(0.5,),
            ),
            Item(
                "Zoom &out",
                "zoom",
                QKeySequence.StandardKey.ZoomOut,
                "Zoom the segment map out",
                args=(2.0,),
            ),
            SEPARATOR,
            Item(
                "Rows by &address",
                "map.set_sort",
                "Ctrl+1",
                "Segments in address order",
                "sort_address_action",
                args=(SORT_ADDRESS,),
                group="sort",
                checked=True,
            ),
            Item(
                "Rows by &size",
                "map.set_sort",
                "Ctrl+2",
                "Largest segments first",
                "sort_size_action",
                args=(SORT_SIZE,),
                group="sort",
            ),
            Item(
                "Rows by largest &free gap",
                "map.set_sort",
                "Ctrl+3",
                "Segments with the largest free gaps first",
                "sort_free_action",
                args=(SORT_FREE,),
                group="sort",
            ),
        ),
    ),
    (
        "&Timeline",
        (
            Item(
                "Jump to peak &allocated",
                "jump_to_peak",
                "Ctrl+Shift+P",
                "Move the cursor to the peak of allocated memory",
                "peak_action",
                needs=TRACE,
                args=("allocated",),
            ),
            Item(
                "Jump to peak &reserved",
                "jump_to_peak",
                "Ctrl+Shift+R",
                "Move the cursor to the event after which the shown device's reserved memory peaks",
                "peak_reserved_action",
                needs=TRACE,
                args=("reserved",),
            ),
            Item(
                "Jump to &OOM",
                "jump_to_oom",
                "Ctrl+J",
                "Move the cursor to the last out-of-memory event",
                "oom_action",
                needs=TRACE,
            ),
            SEPARATOR,
            Item(
                "&Previous OOM",
                "jump_to_oom",
                "Ctrl+[",
                "The OOM before the cursor",
                "prev_oom_action",
                needs=TRACE,
                args=(-1,),
            ),
            Item(
                "&Next OOM",
                "jump_to_oom",
                "Ctrl+]",
                "The OOM after the cursor",
                "next_oom_action",
                needs=TRACE,
                args=(+1,),
            ),
            Item(
                "&Latest (as recorded)",
                "go_latest",
                "Ctrl+End",
                "Back to the snapshot as recorded (the end of the trace)",
                "latest_action",
                needs=TRACE,
            ),
            SEPARATOR,
            Item(
                "Step &back",
                "step_cursor",
                "Alt+Left",
                "One event back (in the timeline: Left; Shift: 100)",
                "step_back_action",
                needs=TRACE,
                args=(-1,),
            ),
            Item(
                "Step &forward",
                "step_cursor",
                "Alt+Right",
                "One event forward (in the timeline: Right; Shift: 100)",
                "step_fwd_action",
                needs=TRACE,
                args=(+1,),
            ),
            SEPARATOR,
            Item(
                "Toggle x axis: &time / events",
                "timeline.toggle_mode",
                "Ctrl+T",
                "Show the timeline against time or event index",
                "xaxis_action",
                needs=TRACE,
            ),
        ),
    ),
    (
        "T&ools",
        (
            Item(
                "&What-if: other allocator settings…",
                "tools.open_whatif",
                "Ctrl+Shift+W",
                "Replay this trace through a model of the caching allocator under other "
                "PYTORCH_CUDA_ALLOC_CONF settings: peak memory, fragmentation, OOMs",
                "whatif_action",
                needs=DOCUMENT,
                enabled=False,
            ),
            Item(
                "&Diagnosis: what would make it fit…",
                "tools.open_diagnosis",
                "Ctrl+Shift+D",
                "Rank the changes that would make this run fit (smaller batch, allocator "
                "settings, freeing what is kept, checkpointing, ...) by predicted peak memory",
                "diagnosis_action",
                needs=DOCUMENT,
                enabled=False,
            ),
        ),
    ),
    (
        "&Help",
        (
            Item(
                "&Keyboard shortcuts",
                "tools.show_shortcuts",
                "Ctrl+/",
                "Every shortcut of this window",
                "shortcuts_action",
            ),
            Item(
                "How to &record a snapshot",
                "tools.show_record_help",
                tip="The command line and the torch calls that write a snapshot",
                attr="record_help_action",
            ),
            SEPARATOR,
            Item("&About vramscope", "tools.about", tip="Versions and license"),
        ),
    ),
)

# The window's actions that are in no menu (Help > Keyboard shortcuts lists them as
# "Window").
WINDOW_ACTIONS: tuple[Item, ...] = (
    Item(
        "Cancel loading",
        "loading.cancel_clicked",
        "Esc",
        "Cancel the load",
        "cancel_action",
        enabled=False,
    ),
)


def _resolve(window, path: str):
    return functools.reduce(getattr, path.split("."), window)


def _action(window, item: Item, groups: dict[str, QActionGroup]) -> QAction:
    slot = _resolve(window, item.slot)
    if item.args:
        slot = functools.partial(_call, slot, item.args)
    action = make_action(window, item.text, slot, item.key, item.tip)
    if item.group is not None:
        action.setCheckable(True)
        groups.setdefault(item.group, QActionGroup(window)).addAction(action)
        action.setChecked(item.checked)
    action.setEnabled(item.enabled)
    if item.attr is not None:
        setattr(window, item.attr, action)
    return action


def _call(slot, args: tuple, *_signal) -> None:
    """``slot(*args)``, whatever the signal carries (``triggered``'s ``checked``)."""
    slot(*args)


def build_menus(window) -> None:
    """Build :data:`MENUS` into ``window``'s menu bar and add :data:`WINDOW_ACTIONS` to
    it."""
    groups: dict[str, QActionGroup] = {}
    for title, entries in MENUS:
        menu = window.menuBar().addMenu(title)
        for entry in entries:
            if entry is SEPARATOR:
                menu.addSeparator()
            elif isinstance(entry, Submenu):
                sub = menu.addMenu(entry.text)
                setattr(window, entry.attr, sub)
                fill = _resolve(window, entry.fill)
                sub.aboutToShow.connect(fill)
                fill()
            else:
                menu.addAction(_action(window, entry, groups))
    for item in WINDOW_ACTIONS:
        window.addAction(_action(window, item, groups))


def enable_actions(window, needs: str, on: bool) -> None:
    """Enable (``on``) or disable ``window``'s actions that need ``needs``."""
    for _title, entries in MENUS:
        for entry in entries:
            if isinstance(entry, Item) and entry.needs == needs and entry.attr is not None:
                getattr(window, entry.attr).setEnabled(on)
