#!/usr/bin/env bash
# A node without a package registry (the H200 machines): unpack the carried Debian packages of
# the sandbox (bubblewrap, libcap2, libseccomp2) and print what to export.
#
#   here:    mkdir -p .debs && (cd .debs && apt-get download bubblewrap libcap2 libseccomp2)
#   there:   eval "$(bash runner/sandbox/device_setup.sh)"      (carry .debs)
#
# bwrap gets a wrapper that finds the unpacked libcap; the worker finds libseccomp through
# KERNELOPT_LIBSECCOMP. Packages the node already has are used as they are.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEBS="${DEBS:-$ROOT/.debs}"
DEST="${DEST:-/tmp/kernelopt-sandbox-debs}"
mkdir -p "$DEST"
for deb in "$DEBS"/*.deb; do
    [ -e "$deb" ] || { echo "device_setup: no .deb in $DEBS (carry .debs)" >&2; exit 1; }
    dpkg -x "$deb" "$DEST"
done
LIBS="$(dirname "$(find "$DEST" -name 'libcap.so.2*' | head -n 1)")"
if command -v bwrap >/dev/null 2>&1; then
    BWRAP="$(command -v bwrap)"
else
    BWRAP="$DEST/bwrap"
    cat > "$BWRAP" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$DEST/usr/bin/bwrap" "\$@"
WRAP
    chmod 755 "$BWRAP"
fi
echo "export KERNELOPT_BWRAP=$BWRAP"
if ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 '; then
    echo "export KERNELOPT_LIBSECCOMP=$(find "$DEST" -name 'libseccomp.so.2' | head -n 1)"
fi
"$BWRAP" --version >&2
