"""``summary``, ``advise`` and ``whatif`` of an ``ssh://`` file, run on its host.

When the host has vramscope of this very version, the command runs there
(:func:`~..model.io.remote.run_there`) and only its answer crosses the wire: the
JSON of ``summary`` (rendered here as text by the same function as a local
summary), the output of ``advise`` and ``whatif`` as the user asked for it.  The
file's name in the answer is the address typed here, as when the file is streamed.
Otherwise (no vramscope there, another version, ssh failed) the command streams the
file as before; ``VRAMSCOPE_REMOTE_RUN=0`` always streams.
"""

from __future__ import annotations

import json
import os
import sys

ENV_RUN = "VRAMSCOPE_REMOTE_RUN"
#: The remote command's exit code for a refusal (bad file, bad device): shown as is.
USAGE = 2


def answered_there(command: str, args, argv: list[str]) -> int | None:
    """Run ``vramscope COMMAND ARGV`` on the host of ``args.file`` and print its answer
    as the local command would: the exit code, or None when it could not run there
    (then the caller reads the file over ssh itself)."""
    if os.environ.get(ENV_RUN, "") == "0":
        return None
    from .. import __version__
    from ..model.io.remote import RemoteError, parse_url, run_there

    try:
        rp = parse_url(args.file)
    except RemoteError:
        return None  # the caller's own read reports it
    if args.file not in argv:
        return None
    argv = list(argv)
    index = argv.index(args.file)
    json_wanted = bool(getattr(args, "json", False))
    if command == "summary" and not json_wanted:
        argv.append("--json")  # the text is rendered here, from the JSON
    got = run_there(rp, [command, *argv], index + 1, __version__)
    if got is None:
        return None
    err = got.stderr.decode("utf-8", "replace")
    err = err.replace(f"vramscope: error: {got.path_there}:", f"vramscope: error: {args.file}:")
    if got.code != 0:
        if got.code != USAGE or "vramscope: error:" not in err:
            return None  # it failed there for a reason of its own: read the file here
        sys.stderr.write(err)
        return got.code
    out = got.stdout.decode("utf-8", "replace")
    if command == "summary" or (command == "advise" and json_wanted):
        try:
            data = json.loads(out)
        except ValueError:
            return None
        data["file"] = args.file
        if command == "summary" and not json_wanted:
            from ..model.reports.summary import format_text

            out = format_text(data) + "\n"
        else:
            out = json.dumps(data, indent=1) + "\n"
    sys.stderr.write(err)
    sys.stdout.write(out)
    return 0
