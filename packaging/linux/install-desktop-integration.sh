#!/bin/sh
# Desktop integration for the portable vramscope folder (the .tar.gz): a menu
# entry, icons and the snapshot file type, pointing at the vramscope executable
# beside this script.  Nothing is copied but those small files; keep the folder
# where it is.
#
#   ./install-desktop-integration.sh             for you (~/.local/share)
#   sudo ./install-desktop-integration.sh --system   for everyone (/usr/local/share)
#   ./install-desktop-integration.sh --uninstall [--system]
#
# vramscope is registered as the handler of its own type
# (application/x-pytorch-memory-snapshot: *snapshot*.pickle, vramscope capture
# files) and offered under "Open With" for any pickle (application/x-python-pickle);
# no default application is set for anything (no mimeapps.list is written).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
share="${XDG_DATA_HOME:-$HOME/.local/share}"
action=install
for arg in "$@"; do
    case "$arg" in
        --system) share=/usr/local/share ;;
        --uninstall) action=uninstall ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option: $arg" >&2; exit 2 ;;
    esac
done

refresh() {
    if command -v update-mime-database >/dev/null 2>&1; then
        update-mime-database "$share/mime" || true
    fi
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q "$share/applications" || true
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$share/icons/hicolor/index.theme" ]; then
        gtk-update-icon-cache -q -t "$share/icons/hicolor" || true
    fi
    return 0
}

files="applications/vramscope.desktop mime/packages/vramscope.xml icons/hicolor/scalable/apps/vramscope.svg"
for size in 16 32 48 64 128 256; do
    files="$files icons/hicolor/${size}x${size}/apps/vramscope.png"
done

if [ "$action" = uninstall ]; then
    for f in $files; do rm -f "$share/$f"; done
    refresh
    echo "vramscope: desktop integration removed from $share"
    exit 0
fi

exe="$here/vramscope"
[ -x "$exe" ] || { echo "vramscope: $exe not found (run this script from the unpacked folder)" >&2; exit 1; }
for f in $files; do
    mkdir -p "$(dirname "$share/$f")"
    cp "$here/share/$f" "$share/$f"
done
# The entry runs this folder's executable: quote the path as the desktop entry
# spec wants (inside "...": \ " ` $ escaped with \, then \ doubled at the file
# level; % doubled) and write it with awk's ENVIRON (no escape processing).
exec_q=$(printf '%s' "$exe" | sed -e 's/\\/\\\\\\\\/g' -e 's/"/\\\\"/g' -e 's/`/\\\\`/g' \
    -e 's/\$/\\\\$/g' -e 's/%/%%/g')
try_q=$(printf '%s' "$exe" | sed -e 's/\\/\\\\/g')
entry="$share/applications/vramscope.desktop"
EXEC_Q="$exec_q" TRY_Q="$try_q" awk '
    /^Exec=vramscope / { sub(/^Exec=vramscope/, ""); print "Exec=\"" ENVIRON["EXEC_Q"] "\"" $0; next }
    /^TryExec=vramscope$/ { print "TryExec=" ENVIRON["TRY_Q"]; next }
    { print }' "$entry" > "$entry.tmp" && mv "$entry.tmp" "$entry"
if command -v desktop-file-validate >/dev/null 2>&1; then
    desktop-file-validate "$entry"
fi
refresh
echo "vramscope: menu entry, icons and file types installed in $share (runs $exe)"
