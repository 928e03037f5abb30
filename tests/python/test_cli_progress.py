"""`--progress` of the long commands (docs/cli.md "Progress"), with standard error on a pipe as in
a job scheduler's log: `log` lines whose counts and percentages agree and end at the total with
one closing line, nothing from `none` or from `auto` on a short command, the redrawn bar from
`bar`, and a usage error for any other mode. Every file is tiny; $VOXPIPE_PROGRESS_INTERVAL=0
makes `log` write a line at every step, so the tests need not wait for the 5 s interval.

The binary is $VOXPIPE_CLI if set, else the one pip installed in .venv/bin; the tests are skipped
when neither exists.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from test_cli_conventions import CLI, progress_cases

pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')

COMMANDS = ['convert', 'index', 'resample', 'dcm2nii', 'bench-load']

# "voxpipe resample: 12/100 volumes (12%), 3.1 volumes/s, ETA 0:28 [phase]" and the closing
# "voxpipe resample: 100/100 volumes (100%), 3.2 volumes/s, done in 0:31".
LINE = re.compile(
    r'voxpipe (?P<cmd>[a-z0-9-]+): (?P<done>\d+(?:\.\d)?)/(?P<total>\d+(?:\.\d)?) (?P<unit>[A-Za-z]+)'
    r' \((?P<pct>\d+)%\), (?P<rate>\d+\.\d) (?P<rate_unit>[A-Za-z]+)/s, '
    r'(?:ETA (?P<eta>\d+:\d\d|\?)(?: \[(?P<phase>[^\]]+)\])?|done in (?P<took>\d+:\d\d))')

SIZE_UNITS = {'B': 1, 'KiB': 1024, 'MiB': 1024 ** 2}


def run(args, mode: str | None, interval: str | None = None) -> subprocess.CompletedProcess:
    """The command with stderr on a pipe; `mode` None leaves --progress out (auto)."""
    env = dict(os.environ)
    env.pop('VOXPIPE_PROGRESS_INTERVAL', None)
    if interval is not None:
        env['VOXPIPE_PROGRESS_INTERVAL'] = interval
    extra = [] if mode is None else ['--progress', mode]
    if args[0] != 'bench-load':
        extra.append('--overwrite')  # each case runs more than once in a test
    r = subprocess.run([str(CLI), *map(str, args), *extra], capture_output=True, timeout=120,
                       env=env)
    # Decoded by hand: text=True would turn each \r of the bar into \n.
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def parse_log(stderr: str, command: str) -> list[re.Match]:
    lines = stderr.splitlines()
    assert lines, 'no progress lines'
    assert '\r' not in stderr
    matches = []
    for line in lines:
        m = LINE.fullmatch(line)
        assert m, f'not a progress line: {line!r}'
        assert m['cmd'] == command, line
        matches.append(m)
    return matches


def check_counts(matches: list[re.Match], final_counts: str) -> None:
    """Counts never go back, stay within the total, agree with the percentage, and the last line
    (the only closing one) shows the whole total."""
    *steps, last = matches
    assert steps, 'no line before the closing one'
    assert last['took'] is not None and all(m['took'] is None for m in steps)
    assert f"{last['done']}/{last['total']} {last['unit']}" == final_counts
    assert last['pct'] == '100'
    previous = None
    for m in matches:
        done, total, pct = float(m['done']), float(m['total']), int(m['pct'])
        assert 0 <= done <= total, m[0]
        if m['unit'] in SIZE_UNITS:  # sizes are rounded to 0.1 of their unit
            assert m['rate_unit'] in ('B', 'KiB', 'MiB', 'GiB', 'TiB'), m[0]
            assert abs(pct - 100 * done / total) <= 1 + 5 / total, m[0]
        else:
            assert m['rate_unit'] == m['unit'], m[0]
            assert pct == int(done) * 100 // int(total), m[0]
            if m['eta'] is not None:
                assert (m['eta'] == '?') == (done == 0), m[0]
        if previous is not None and previous[1] == total:
            assert done >= previous[0], m[0]
        previous = (done, total)
    assert steps[-1]['done'] == last['done'] and steps[-1]['total'] == last['total']


@pytest.mark.parametrize('case', range(5), ids=COMMANDS)
def test_log_lines_count_up_to_the_total_and_close_with_the_time(tmp_path, case):
    args, counts = progress_cases(tmp_path)[case]
    r = run(args, 'log', interval='0')
    assert r.returncode == 0, r.stderr
    check_counts(parse_log(r.stderr, args[0]), counts)


def test_log_lines_name_the_phase_of_a_command_with_phases(tmp_path):
    args, _ = progress_cases(tmp_path)[COMMANDS.index('dcm2nii')]
    r = run(args, 'log', interval='0')
    assert r.returncode == 0, r.stderr
    phases = [m['phase'] for m in parse_log(r.stderr, 'dcm2nii') if m['phase']]
    assert phases[0] == 'scanning' and 'series 1/1' in phases, phases


def test_log_without_an_interval_line_still_closes_with_the_time(tmp_path):
    # The default interval (5 s) is longer than the command: only the closing line.
    args, counts = progress_cases(tmp_path)[COMMANDS.index('resample')]
    r = run(args, 'log')
    assert r.returncode == 0, r.stderr
    [m] = parse_log(r.stderr, 'resample')
    assert m['took'] is not None and f"{m['done']}/{m['total']} {m['unit']}" == counts


@pytest.mark.parametrize('case', range(5), ids=COMMANDS)
def test_none_and_auto_on_a_pipe_keep_a_short_command_quiet(tmp_path, case):
    args, _ = progress_cases(tmp_path)[case]
    quiet = [run(args, 'none', interval='0'), run(args, None), run(args, 'auto')]
    for r in quiet:
        assert r.returncode == 0, r.stderr
        assert r.stderr == '', r.stderr
    # The output itself does not depend on the mode (but for its timings and memory figures).
    logged = run(args, 'log', interval='0')
    if args[0] != 'bench-load':  # a table of timings
        def figures_out(text):
            return re.sub(r'\d+\.\d+', 'X', text)
        assert {figures_out(r.stdout) for r in quiet} == {figures_out(logged.stdout)}


def test_auto_on_a_pipe_logs_once_the_interval_has_passed(tmp_path):
    args, counts = progress_cases(tmp_path)[COMMANDS.index('resample')]
    r = run(args, 'auto', interval='0')
    assert r.returncode == 0, r.stderr
    check_counts(parse_log(r.stderr, 'resample'), counts)


@pytest.mark.parametrize('case', range(5), ids=COMMANDS)
def test_bar_is_redrawn_even_on_a_pipe_when_asked(tmp_path, case):
    args, counts = progress_cases(tmp_path)[case]
    r = run(args, 'bar')
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(f'\rvoxpipe {args[0]} ['), repr(r.stderr[:80])
    assert '\n' not in r.stderr
    assert re.search(re.escape(f'] 100% {counts}, ETA ') + r'\d+:\d\d', r.stderr), r.stderr
    assert r.stderr.rstrip(' ').endswith('\r')  # erased at the end


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('value', ['verbose', 'LOG', ''])
def test_an_unknown_mode_is_a_usage_error(tmp_path, command, value):
    r = subprocess.run([str(CLI), command, '--progress', value, 'in.nii', str(tmp_path / 'out')],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f'voxpipe {command}: --progress expects auto, bar, log or none, '
                        f'but received {value}\n')
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('command', COMMANDS)
def test_a_missing_mode_is_a_usage_error(command):
    r = subprocess.run([str(CLI), command, 'in.nii', '--progress'], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert '--progress needs a value' in r.stderr


@pytest.mark.parametrize('command', COMMANDS)
def test_every_long_command_lists_the_option(command):
    r = subprocess.run([str(CLI), command, '--help'], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert re.search(r'^  --progress M +auto \(default\), bar, log or none', r.stdout, re.M), r.stdout
