#!/usr/bin/env bash
# Installs each extra of voxpipe (pyproject.toml's [project.optional-dependencies]) from the
# wheelhouse as a user would, `pip install --find-links WHEELHOUSE "voxpipe[EXTRA]"`, each into a
# fresh virtual environment of the oldest and the newest Python voxpipe supports, and checks what
# it brought (tests/wheel/extras_check.py): dask, zarr and s3 are installed and used (vp.to_dask
# computed on a distributed Client, a NIfTI-Zarr store written and read back, an obstore store for
# an s3:// URL), each package at or above the wheel's bound; where an extra's python_version
# marker leaves it empty (dask before 3.10, zarr before 3.11) the install must succeed and the
# feature must say which Python it needs. The PyTorch extras (torch, monai, torchio) and `all` are
# only resolved (`pip install --dry-run --report`: pip reads the packages' metadata and downloads
# no torch): the report must hold each package of the extra at or above its bound where its
# marker applies, none where it does not, and no torch at all for `all`.
# Same environment as scripts/test_wheel.sh: run from a temporary folder outside the source tree,
# PATH with only the environment's bin/ and a python symlink, no LD_LIBRARY_PATH or PYTHONPATH.
# Packages come from PyPI or pip's cache; `pip install --no-compile` keeps installs short, and
# the Pythons run side by side (their output is printed in order when all are done).
# Usage: scripts/test_extras.sh [WHEELHOUSE]   (default dist/wheelhouse)
# Environment: EXTRAS_PYTHONS, the Python versions (default "3.9 3.13": the oldest and newest of
# pyproject.toml's classifiers).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
wheelhouse=$(realpath "${1:-dist/wheelhouse}")
read -r -a pythons <<< "${EXTRAS_PYTHONS:-3.9 3.13}"
# venv_version, find_python X.Y [HINT] (as scripts/build_wheel.sh finds it)
source scripts/find_python.sh

shopt -s nullglob
wheels=("$wheelhouse"/voxpipe-*manylinux*.whl)
shopt -u nullglob
[ ${#wheels[@]} -ge 1 ] || { echo "no wheel in $wheelhouse: run scripts/build_wheel.sh" >&2; exit 1; }
# voxpipe-0.1.0-cp311-...: the wheelhouse's version, pinned so that pip takes voxpipe from it
version=$(basename "${wheels[0]}" | cut -d- -f2)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/voxpipe-extras.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# What pip resolved for voxpipe[EXTRAS] (pip's --report JSON) against the wheel's metadata:
# resolved.py REPORT EXTRAS (comma-separated), run by the fresh environment's Python.
cat > "$tmp/resolved.py" <<'PY'
import json, re, sys
report, extras = json.load(open(sys.argv[1])), sys.argv[2].split(",")
got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
(voxpipe,) = [i for i in report["install"] if i["metadata"]["name"] == "voxpipe"]
assert voxpipe["download_info"]["url"].startswith("file://"), voxpipe["download_info"]["url"]
requires = voxpipe["metadata"].get("requires_dist", [])
def release(v):
    return tuple(int(p) for p in re.findall(r"\d+", v.split("+")[0])[:3])
if extras == ["all"]:
    assert "torch" not in got, f"voxpipe[all] brings torch {got.get('torch')}"
    print(f"ok: voxpipe[all] resolves without torch ({', '.join(sorted(got))})")
    sys.exit()
for extra in extras:
    mine = [r for r in requires if f'extra == "{extra}"' in r.partition(";")[2]]
    assert mine, f"the wheel's metadata has no voxpipe[{extra}]"
    for r in mine:
        req, _, marker = r.partition(";")
        name, _, bound = req.partition(">=")
        name = name.strip().lower()
        floor = re.search(r'python_version >= "(\d+)\.(\d+)"', marker)
        if floor is None or sys.version_info[:2] >= (int(floor[1]), int(floor[2])):
            assert name in got and release(got[name]) >= release(bound), (r, got.get(name))
            print(f"ok: voxpipe[{extra}] resolves {name} {got[name]} ({r})")
        else:
            assert name not in got, (r, got[name])
            print(f"ok: voxpipe[{extra}] resolves no {name} on this Python ({r})")
PY

test_python() {  # X.Y
  local v=$1 t=$SECONDS t1 python dir extra extras clean_env
  python=$(find_python "$v" "to test the extras with")
  # pip would say only "no matching distribution" without the wheel of this Python.
  local tag="cp${v/./}-cp${v/./}"
  [ "${v#3.}" -lt 12 ] || tag="cp3*-abi3"
  compgen -G "$wheelhouse/voxpipe-$version-$tag-*.whl" > /dev/null ||
    { echo "no $tag wheel for Python $v in $wheelhouse: scripts/build_wheel.sh $v" >&2; return 1; }
  dir=$tmp/py$v
  mkdir -p "$dir/bin" "$dir/work"
  ln -s "$python" "$dir/bin/python3"
  ln -s python3 "$dir/bin/python"
  cp tests/wheel/extras_check.py "$dir/work/"
  clean_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME -u VOXPIPE_CLI -u VIRTUAL_ENV
             PATH="$dir/venv/bin:$dir/bin" PIP_DISABLE_PIP_VERSION_CHECK=1)
  for extra in dask zarr s3; do
    t1=$SECONDS
    rm -rf "$dir/venv"
    "$python" -m venv "$dir/venv"
    "${clean_env[@]}" "$dir/venv/bin/python" -m pip install -q --no-compile \
      --find-links "$wheelhouse" "voxpipe[$extra]==$version"
    echo "installed voxpipe[$extra] with Python $v in $((SECONDS - t1)) s"
    (cd "$dir/work" && "${clean_env[@]}" "$dir/venv/bin/python" extras_check.py "$extra")
  done
  # The last environment resolves the others (what it holds does not count: --ignore-installed).
  for extras in torch,monai,torchio all; do
    t1=$SECONDS
    "${clean_env[@]}" "$dir/venv/bin/python" -m pip install -q --dry-run --ignore-installed \
      --report "$dir/report.json" --find-links "$wheelhouse" "voxpipe[$extras]==$version"
    echo "resolved voxpipe[$extras] with Python $v in $((SECONDS - t1)) s"
    "${clean_env[@]}" "$dir/venv/bin/python" "$tmp/resolved.py" "$dir/report.json" "$extras"
  done
  rm -rf "$dir"
  echo "extras on Python $v: passed in $((SECONDS - t)) s"
}

pids=()
for v in "${pythons[@]}"; do
  test_python "$v" > "$tmp/py$v.log" 2>&1 &
  pids+=($!)
done
failed=()
for i in "${!pythons[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  cat "$tmp/py${pythons[$i]}.log"
  [ "$rc" = 0 ] || failed+=("${pythons[$i]}")
done
[ ${#failed[@]} = 0 ] || { echo "scripts/test_extras.sh: FAILED with Python ${failed[*]}" >&2; exit 1; }
echo "scripts/test_extras.sh: passed in $((SECONDS - start)) s"
