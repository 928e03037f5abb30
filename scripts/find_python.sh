# Sourced by scripts/build_wheel.sh and scripts/test_wheel.sh (from the repository root): how
# both find the interpreter of a Python version, so that a wheel is tested with the Python it
# was built with.
#   venv_version   X.Y of the .venv's Python
#   find_python    X.Y [HINT]: prints the interpreter's path: the .venv's base interpreter for its
#                  own version, else pyenv's, else pythonX.Y on PATH; else prints HINT (what to
#                  do) on stderr and fails
venv_version=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')

find_python() {  # X.Y [HINT]
  local v=$1 p
  if [ "$v" = "$venv_version" ]; then
    .venv/bin/python -c 'import sys; print(sys._base_executable)'
    return
  fi
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  p=$(command -v "python$v") && "$p" -c 'pass' 2>/dev/null && { echo "$p"; return; }
  echo "no Python $v${2:+ $2}" >&2
  return 1
}
