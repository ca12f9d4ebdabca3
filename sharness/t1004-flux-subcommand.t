#!/bin/sh

test_description='flux epilog-gate: flux finds flux-epilog-gate on FLUX_EXEC_PATH or PATH

flux(1) looks for an unknown subcommand NAME as flux-NAME.py (run under
flux'"'"'s python) and then flux-NAME, in each directory of FLUX_EXEC_PATH
(its built-in libexec/flux/cmd first, then the caller'"'"'s FLUX_EXEC_PATH)
and then in each directory of PATH.'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

bindir=$(dirname "$(command -v flux-epilog-gate)")
fluxcmd=$(command -v flux)

# PATH without the directory of flux-epilog-gate.
path_without_bindir() {
	printf "%s\n" "$PATH" | tr : "\n" | grep -vxF "$bindir" | paste -sd: -
}

# flux run by absolute path prepends its own directory to PATH: the
# "not found" test makes sense only if flux-epilog-gate is elsewhere.
test "$(dirname "$fluxcmd")" != "$bindir" && test_set_prereq SEPARATE_BINDIR

test_expect_success 'load the plugin and hold a job' '
	gate_load &&
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q $jobid bb-teardown
'
test_expect_success 'flux epilog-gate list works with its directory on PATH' '
	flux epilog-gate list >path.out &&
	test_debug "cat path.out" &&
	grep "bb-teardown *pending" path.out
'
test_expect_success SEPARATE_BINDIR 'without it on PATH or FLUX_EXEC_PATH flux says it is not a command' '
	test_must_fail env PATH="$(path_without_bindir)" \
		"$fluxcmd" epilog-gate list 2>none.err &&
	test_debug "cat none.err" &&
	grep "epilog-gate.* is not a flux command" none.err
'
test_expect_success 'flux epilog-gate list works with FLUX_EXEC_PATH=its directory' '
	env PATH="$(path_without_bindir)" FLUX_EXEC_PATH="$bindir" \
		"$fluxcmd" epilog-gate list >exec.out &&
	test_debug "cat exec.out" &&
	grep "bb-teardown *pending" exec.out
'
test_expect_success 'flux -v: the built-in exec path is searched before FLUX_EXEC_PATH' '
	env PATH="$(path_without_bindir)" FLUX_EXEC_PATH="$bindir" \
		"$fluxcmd" -v epilog-gate path >verbose.out 2>&1 &&
	test_debug "cat verbose.out" &&
	grep "^FLUX_EXEC_PATH=.*:$bindir$" verbose.out &&
	grep "trying to exec $bindir/flux-epilog-gate$" verbose.out &&
	grep "trying to exec" verbose.out | tail -1 | grep "$bindir/"
'
test_expect_success 'flux epilog-gate release works as a subcommand too' '
	flux epilog-gate release $jobid bb-teardown &&
	flux epilog-gate list --json | jq -e "length == 0"
'

test_done
