#!/usr/bin/env bash
# make install: the Python package and CLI (a private venv), the PMPI library, the
# SPANK plugin and its plugstack.conf line, the eBPF objects, the C tools and the
# systemd units, under PREFIX (staged under DESTDIR when set).  docs/INSTALL.md.
#
# Variables (make passes them through):
#   PREFIX      /usr/local            everything but configuration
#   DESTDIR     (empty)               staging root for packagers; paths inside the
#                                     installed files never contain it
#   SYSCONFDIR  /etc for PREFIX /usr or /usr/local, else PREFIX/etc
#   UNITDIR     PREFIX/lib/systemd/system
#   PYTHON      the interpreter the venv is made from (3.11; the services run it, so
#               it must be readable by the sdnmpi user: e.g. /usr/bin/python3.11)
#   WHEEL       an sdnmpi wheel to install instead of building one from this tree
#   PIP_ARGS    more pip options, e.g. "--no-index --find-links /srv/wheelhouse"
#   BUILD       the build tree (make csrc's output), default ./build
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case "$PREFIX" in
    /usr | /usr/local) SYSCONFDIR=${SYSCONFDIR:-/etc} ;;
    *) SYSCONFDIR=${SYSCONFDIR:-$PREFIX/etc} ;;
esac
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-$here/build}
PIP_ARGS=${PIP_ARGS:-}
BINDIR=$PREFIX/bin
LIBDIR=$PREFIX/lib/sdnmpi
VENV=$LIBDIR/venv
for dir in PREFIX SYSCONFDIR UNITDIR; do
    case "${!dir}" in
        /*) ;;
        *) echo "install: $dir=${!dir} must be an absolute path" >&2; exit 2 ;;
    esac
done

say() { printf 'install: %s\n' "$*"; }
d() { printf '%s%s' "$DESTDIR" "$1"; }  # the staged location of an installed path

# --- what must be built (make csrc) before anything is copied: nothing half-installed
required=(bpf/tagger.bpf.o bpf/ecn.bpf.o bpf/accept.bpf.o)
for f in "${required[@]}"; do
    [ -f "$BUILD/$f" ] || { echo "install: $BUILD/$f missing: run make csrc" >&2; exit 2; }
done
flavours=()
for fl in openmpi mpich; do
    [ -f "$BUILD/$fl/libsdnmpi.so" ] && flavours+=("$fl")
done
[ ${#flavours[@]} -gt 0 ] || { echo "install: no $BUILD/*/libsdnmpi.so: run make csrc" >&2; exit 2; }
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || {
    echo "install: PYTHON=$PYTHON is not Python 3.11 (pyproject.toml)" >&2; exit 2; }

# --- the wheel (generated gRPC stubs included: setup.py)
if [ -z "${WHEEL:-}" ]; then
    wheeldir=$BUILD/wheel
    rm -rf "$wheeldir"
    say "building the wheel"
    "$PYTHON" -m pip wheel --quiet --no-deps -w "$wheeldir" "$here"
    WHEEL=$(ls "$wheeldir"/sdnmpi-*.whl)
fi

# --- the Python environment: a private venv, so the pinned dependencies (os-ken,
# grpcio, protobuf) never meet the distribution's Python packages
say "venv $VENV"
rm -rf "$(d "$VENV")"
install -d "$(d "$LIBDIR")"
"$PYTHON" -m venv "$(d "$VENV")"
# shellcheck disable=SC2086  # PIP_ARGS is a list of options
"$(d "$VENV")/bin/python" -m pip install --quiet --disable-pip-version-check $PIP_ARGS "$WHEEL"
if [ -n "$DESTDIR" ]; then  # scripts name their interpreter by its staged path
    { grep -rlIF -- "$DESTDIR" "$(d "$VENV")/bin" "$(d "$VENV")/pyvenv.cfg" || true; } |
        while read -r f; do sed -i "s|$DESTDIR||g" "$f"; done
fi
install -d "$(d "$BINDIR")"
ln -sfn "$VENV/bin/sdnmpi" "$(d "$BINDIR")/sdnmpi"
# the emulated demo (make demo's run, root): the script and a launcher with the venv's Python
install -D -m 0644 "$here/scripts/demo_fabric.py" "$(d "$LIBDIR")/demo/demo_fabric.py"
printf '#!/bin/sh\n# sdnmpi: the emulated demo from this installation (docs/INSTALL.md)\n%s\n' \
    "exec env -u PYTHONPATH $VENV/bin/python $LIBDIR/demo/demo_fabric.py \"\$@\"" \
    > "$(d "$BINDIR")/sdnmpi-demo"
chmod 0755 "$(d "$BINDIR")/sdnmpi-demo"

# --- compiled parts, in the build tree's layout (sdnmpi.artefacts looks them up there)
install -d "$(d "$LIBDIR")/bpf"
install -m 0644 "${required[@]/#/$BUILD/}" "$(d "$LIBDIR")/bpf/"
for fl in "${flavours[@]}"; do
    install -d "$(d "$LIBDIR")/$fl"
    install -m 0755 "$BUILD/$fl/libsdnmpi.so" "$(d "$LIBDIR")/$fl/"
    for tool in sdnmpi-bench sdnmpi-replay; do
        if [ -f "$BUILD/$fl/$tool" ]; then
            install -m 0755 "$BUILD/$fl/$tool" "$(d "$LIBDIR")/$fl/"
            ln -sfn "$LIBDIR/$fl/$tool" "$(d "$BINDIR")/$tool-$fl"
        fi
    done
done
if [ -f "$BUILD/idle/libsdnmpi_idle.so" ]; then  # the emulator's idle ranks (sdnmpi emu)
    install -D -m 0755 "$BUILD/idle/libsdnmpi_idle.so" "$(d "$LIBDIR")/idle/libsdnmpi_idle.so"
fi
if [ -f "$BUILD/sim/libsdnmpi_sim.so" ]; then  # the simulator's C phase engine
    install -D -m 0755 "$BUILD/sim/libsdnmpi_sim.so" "$(d "$LIBDIR")/sim/libsdnmpi_sim.so"
fi
if [ -f "$BUILD/spank/sdnmpi_spank.so" ]; then
    install -D -m 0755 "$BUILD/spank/sdnmpi_spank.so" "$(d "$LIBDIR")/spank/sdnmpi_spank.so"
    install -d "$(d "$SYSCONFDIR")/slurm/plugstack.conf.d"
    printf '%s\n' "# sdnmpi: job routes from the interconnect manager (docs/INSTALL.md)" \
        "optional $LIBDIR/spank/sdnmpi_spank.so manager=unix:/run/sdnmpi/manager.sock" \
        > "$(d "$SYSCONFDIR")/slurm/plugstack.conf.d/sdnmpi.conf"
else
    say "no SPANK plugin in $BUILD/spank (needs libgrpc++-dev and slurm headers): skipped"
fi

# --- services: units with this installation's paths, the sdnmpi user, /etc/sdnmpi
install -d "$(d "$UNITDIR")" "$(d "$SYSCONFDIR")/sdnmpi"
for unit in "$here"/packaging/systemd/*.service; do
    sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@LIBDIR@|$LIBDIR|g" \
        "$unit" > "$(d "$UNITDIR")/$(basename "$unit")"
    chmod 0644 "$(d "$UNITDIR")/$(basename "$unit")"
done
install -D -m 0644 "$here/docs/INSTALL.md" "$(d "$LIBDIR")/doc/INSTALL.md"
# the configuration: every key commented out at its default (sdnmpi config example);
# an administrator's sdnmpi.toml is never overwritten
install -m 0644 "$here/packaging/sdnmpi.toml.example" "$(d "$SYSCONFDIR")/sdnmpi/sdnmpi.toml.example"
if [ ! -e "$(d "$SYSCONFDIR")/sdnmpi/sdnmpi.toml" ]; then
    install -m 0644 "$here/packaging/sdnmpi.toml.example" "$(d "$SYSCONFDIR")/sdnmpi/sdnmpi.toml"
fi
install -D -m 0644 "$here/packaging/sysusers.d/sdnmpi.conf" "$(d "$PREFIX")/lib/sysusers.d/sdnmpi.conf"

# --- the marker: the installed code's artefact directory is LIBDIR (sdnmpi.artefacts)
version=$("$(d "$VENV")/bin/python" -c 'import importlib.metadata as m; print(m.version("sdnmpi"))')
printf '{"version": "%s", "prefix": "%s", "libdir": "%s", "sysconfdir": "%s"}\n' \
    "$version" "$PREFIX" "$LIBDIR" "$SYSCONFDIR" > "$(d "$LIBDIR")/sdnmpi-install.json"
say "sdnmpi $version in $DESTDIR$PREFIX (flavours: ${flavours[*]}; units in $UNITDIR)"
