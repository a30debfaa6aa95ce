"""ViewState and pinned host memory: its own device entry and document, never a GPU figure."""

from __future__ import annotations

import pickle

from tests.conftest import DATA
from tests.snapshot_forms import raw_object, with_newer_fields
from vramscope.viewer.model import Selection, load_bytes, memory_stats
from vramscope.viewer.model.core.snapshot import HOST_DEVICE
from vramscope.viewer.model.core.units import device_name
from vramscope.viewer.model.view.document import Document
from vramscope.viewer.model.view.view_state import HOST_LABEL, HOST_SCOPE, ViewState


def _doc(host: bool) -> Document:
    obj, _ = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"), host=host)
    return Document.build(load_bytes(pickle.dumps(obj, protocol=4)))  # trusted test data


def test_host_entry_document_and_scope():
    doc = _doc(True)
    vs = ViewState()
    vs.set_document(doc)
    assert vs.device_choices() == [
        ("All devices", None),
        ("Device 0", 0),
        (HOST_LABEL, HOST_DEVICE),
    ]
    host = vs.host_document()
    assert host is vs.host_document()  # built once per file
    assert host.snap.devices == [HOST_DEVICE]
    vs.set_document(host, host=True)
    assert vs.file_doc is doc and vs.host_shown and vs.selection == Selection(device=HOST_DEVICE)
    assert vs.cursor_device == HOST_DEVICE
    assert vs.scope_text().startswith("Figures: " + HOST_SCOPE)
    stats = memory_stats(host.snap, vs.selection)
    assert stats.reserved_bytes == doc.snap.host.reserved_bytes
    # the GPU figures are the file's, host bytes not in them
    gpu = memory_stats(doc.snap, Selection()).reserved_bytes
    assert gpu == int(doc.snap.segments.total_size.sum())
    vs.set_document(doc)
    assert not vs.host_shown and HOST_SCOPE not in vs.scope_text()
    assert device_name(HOST_DEVICE) == "pinned host memory" and device_name(1) == "device 1"


def test_no_host_entry_without_host_memory():
    vs = ViewState()
    vs.set_document(_doc(False))
    assert HOST_DEVICE not in [v for _, v in vs.device_choices()]
    assert vs.host_document() is None


def test_a_newer_document_goes_back_to_the_gpus():
    doc = _doc(True)
    vs = ViewState()
    vs.set_document(doc)
    vs.set_document(vs.host_document(), host=True)
    newer = _doc(True)
    vs.replace_document(newer, Selection(device=HOST_DEVICE))
    assert vs.file_doc is newer and not vs.host_shown and vs.selection == Selection()
    assert vs.host_document().snap.devices == [HOST_DEVICE]
