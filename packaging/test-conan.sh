#!/usr/bin/env bash
# Offline Conan checks, in a throwaway Conan cache (~/.conan2 is never touched); only Conan itself comes
# from the network (PyPI, into a venv kept between runs):
#   1. ConanCenter-like graph: mock recipes hwloc/2.9.3, hwloc/2.11.1 and onetbb/2021.10.0 (which pins
#      hwloc/2.9.3, as ConanCenter's onetbb pins an older hwloc); `conan graph info` of numaplace must resolve
#      without a conflict, to hwloc/2.9.3.
#   2. `conan create` as ConanCenter would run it: source() fetches a release archive (here: the checkout
#      packed into a tar.gz, named in a conandata.yml copy by file:// URL and sha256), against the system's
#      hwloc and oneTBB ([platform_requires], packaging/conan/system.profile), then builds and runs
#      test_package/ (numaplace::numaplace and numaplace::core without OpenMP flags, numaplace::omp with them);
#      then again with -o numaplace/*:compiled=True: libnumaplace built by CMake (-DNUMAPLACE_COMPILED=ON), and
#      test_package's numaplace::compiled program on it.
# Exits 0 on success.
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

work=$(mktemp -d "${TMPDIR:-/tmp}/numaplace-conan.XXXXXX")
export CONAN_HOME=$work/home
trap 'rm -rf "$work"' EXIT
"$conan" profile detect >/dev/null 2>&1
"$conan" remote remove conancenter >/dev/null  # offline: there is no remote to ask
version=$(sed -n 's/^project(numaplace VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")

# 1. ConanCenter-like graph.
mock() { # name version [requirement]
  local dir=$work/mock/$1-$2
  mkdir -p "$dir"
  { echo "from conan import ConanFile"
    echo "class Mock(ConanFile):"
    echo "    name, version = '$1', '$2'"
    echo "    package_type = 'shared-library'"
    [ -n "${3:-}" ] && printf '    def requirements(self):\n        self.requires("%s")\n' "$3"
    true; } >"$dir/conanfile.py"
  "$conan" export "$dir" >/dev/null
}
mock hwloc 2.9.3; mock hwloc 2.11.1; mock onetbb 2021.10.0 hwloc/2.9.3
"$conan" graph info "$root" --version "$version" --format=json >"$work/graph.json" 2>"$work/graph.log" ||
  { cat "$work/graph.log"; echo "test-conan: conan graph info failed in a ConanCenter-like graph" >&2; exit 1; }
python3 - "$work/graph.json" <<'PY'
import json, sys
nodes = json.load(open(sys.argv[1]))["graph"]["nodes"].values()
refs = sorted(n["ref"].split("#")[0] for n in nodes if n["ref"])
print("test-conan: ConanCenter-like graph resolves:", ", ".join(refs))
assert any(r.startswith("hwloc/2.9.3") for r in refs) and not any(r.startswith("hwloc/2.11") for r in refs), refs
PY
"$conan" remove "*" -c >/dev/null

# 2. conan create from a release archive, against the system's hwloc and oneTBB.
mkdir -p "$work/recipe" "$work/archive"
tar -C "$root" --transform "s,^,numaplace-$version/," -czf "$work/archive/numaplace-$version.tar.gz" \
  CMakeLists.txt LICENSE README.md include src cmake packaging/conan
sha=$(sha256sum "$work/archive/numaplace-$version.tar.gz" | cut -d' ' -f1)
cp "$root/conanfile.py" "$work/recipe/"
cp -r "$root/test_package" "$work/recipe/"
rm -rf "$work/recipe/test_package/build"
printf 'sources:\n  "%s":\n    url: "file://%s"\n    sha256: "%s"\n' "$version" "$work/archive/numaplace-$version.tar.gz" "$sha" \
  >"$work/recipe/conandata.yml"

# The repository's profile names Debian 12's versions. Elsewhere, declare the versions this system has.
profile=$root/packaging/conan/system.profile
hwloc_v=$(pkg-config --modversion hwloc)
tbb_v=$(pkg-config --modversion tbb)
if ! grep -qx "hwloc/$hwloc_v" "$profile" || ! grep -qx "onetbb/$tbb_v" "$profile"; then
  profile=$CONAN_HOME/profiles/system
  printf 'include(default)\n\n[platform_requires]\nhwloc/%s\nonetbb/%s\n' "$hwloc_v" "$tbb_v" >"$profile"
  echo "test-conan: system has hwloc $hwloc_v and oneTBB $tbb_v; using a profile with those versions"
fi
"$conan" create "$work/recipe" --version "$version" -pr:a "$profile" --build=missing --no-remote
"$conan" create "$work/recipe" --version "$version" -pr:a "$profile" --build=missing --no-remote \
  -o "numaplace/*:compiled=True"
# ConanCenter's rule: no CMake config files, no Find modules of our own at the top, no .pc files in the
# package; the header-only package has no library, the compiled one has libnumaplace.
packages=$("$conan" list "numaplace/$version:*" --format=json | python3 -c '
import json, sys
d = json.load(sys.stdin)["Local Cache"]
for ref in d.values():
    for rev in ref["revisions"].values():
        for pid, pkg in rev["packages"].items():
            print(pid, pkg["info"].get("options", {}).get("compiled", "False"))')
[ "$(wc -l <<<"$packages")" -eq 2 ] || { echo "test-conan: expected 2 packages, got: $packages" >&2; exit 1; }
while read -r pkg compiled; do
  folder=$("$conan" cache path "numaplace/$version:$pkg")
  if find "$folder" \( -name '*Config.cmake' -o -name '*-config.cmake' -o -name '*.pc' \) | grep .; then
    echo "test-conan: the package ships CMake config or .pc files" >&2; exit 1
  fi
  libs=$(cd "$folder" && find . -name 'libnumaplace*' | sort | tr '\n' ' ')
  case "$compiled:$libs" in
    False:|True:"./lib/libnumaplace.a ") echo "test-conan: package compiled=$compiled: ${libs:-no library}" ;;
    *) echo "test-conan: package compiled=$compiled has libraries: ${libs:-none}" >&2; exit 1 ;;
  esac
done <<<"$packages"
echo "test-conan: OK in $(( $(date +%s) - start )) s"
