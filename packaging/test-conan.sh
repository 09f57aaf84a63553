#!/usr/bin/env bash
# Offline Conan check: `conan create` of numaplace against the system's hwloc and oneTBB (declared as
# [platform_requires] in packaging/conan/system.profile, so no dependency is downloaded or built), which
# builds and runs test_package/. Only Conan itself comes from the network (PyPI, into a venv kept between
# runs). The Conan cache is a throwaway directory: ~/.conan2 is never touched. Exits 0 on success.
#   packaging/test-conan.sh
# Needs python3 (with venv), cmake, a C++17 compiler, pkg-config, libhwloc-dev and libtbb-dev (scripts/deps).
# Environment: NUMAPLACE_CONAN_VENV  venv directory (default ${TMPDIR:-/tmp}/numaplace-conan-venv)
#              NUMAPLACE_CONAN_PIP   pip requirement for Conan (default "conan>=2.0,<3")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${NUMAPLACE_CONAN_VENV:-${TMPDIR:-/tmp}/numaplace-conan-venv}
spec=${NUMAPLACE_CONAN_PIP:-conan>=2.0,<3}
start=$(date +%s)

for m in hwloc tbb; do
  pkg-config --exists "$m" || { echo "test-conan: pkg-config cannot find $m (install libhwloc-dev libtbb-dev: scripts/deps)" >&2; exit 1; }
done

if [ ! -x "$venv/bin/conan" ]; then
  echo "test-conan: installing Conan into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$spec"
fi
conan="$venv/bin/conan"
echo "test-conan: $("$conan" --version)"

CONAN_HOME=$(mktemp -d "${TMPDIR:-/tmp}/numaplace-conan-home.XXXXXX")
export CONAN_HOME
trap 'rm -rf "$CONAN_HOME" "$root/test_package/build"' EXIT
"$conan" profile detect >/dev/null 2>&1
"$conan" remote remove conancenter >/dev/null  # offline: there is no remote to ask

# The repository's profile names Debian 12's versions. Elsewhere, declare the versions this system has.
profile=$root/packaging/conan/system.profile
hwloc_v=$(pkg-config --modversion hwloc)
tbb_v=$(pkg-config --modversion tbb)
if ! grep -qx "hwloc/$hwloc_v" "$profile" || ! grep -qx "onetbb/$tbb_v" "$profile"; then
  profile=$CONAN_HOME/profiles/system
  printf 'include(default)\n\n[platform_requires]\nhwloc/%s\nonetbb/%s\n' "$hwloc_v" "$tbb_v" >"$profile"
  echo "test-conan: system has hwloc $hwloc_v and oneTBB $tbb_v; using a profile with those versions"
fi

"$conan" create "$root" -pr:a "$profile" --build=missing --no-remote
echo "test-conan: OK in $(( $(date +%s) - start )) s"
