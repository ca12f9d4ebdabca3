# sharness-flux.sh: run a sharness test script inside its own Flux instance.
#
# Source this file at the top of a test script, *before* sharness.sh, then
# call run_under_flux, then source sharness.sh:
#
#     #!/bin/sh
#     test_description='what this script proves'
#     . "$(dirname "$0")/sharness-flux.sh"
#     run_under_flux 1 "$@"
#     . "$SHARNESS_SH"
#
# run_under_flux SIZE "$@" re-runs the script (with its arguments "$@") as
# the initial program of `flux start --test-size=SIZE`, in a fresh instance
# with its own state directory and a config directory whose [resource]
# table gives EG_CORES fake cores per broker (default 4, never verified
# against the machine).  Inside that instance it returns at once and the
# script goes on.  The instance directory is removed when every test passed
# and kept (with broker.log and the trash directory) otherwise.
#
# Inside the instance these are set:
#   EG_INSTANCE_DIR  the instance's scratch directory
#   EG_CONF_DIR      its --config-path: write *.toml here, then `flux config
#                    reload`
#   SHARNESS_SH      path of sharness.sh (Debian's package by default;
#                    override with SHARNESS_SH=/path/to/sharness.sh)
#
# The command under test, flux-epilog-gate, is found on PATH (make sharness
# puts the virtualenv's bin directory first).
#
# An enclosing instance (FLUX_URI set in the caller's environment) is never
# used: tests always get an instance of their own, so they cannot load a
# plugin into a system instance by accident.

EG_SHARNESS_DIR=$(cd "$(dirname "$0")" && pwd)

# Keep test-results/ next to the scripts, and do not let sharness.sh put the
# repository root on PATH: the command under test is the installed one.
: "${SHARNESS_TEST_DIRECTORY:=$EG_SHARNESS_DIR}"
: "${SHARNESS_BUILD_DIRECTORY:=$EG_SHARNESS_DIR}"
export SHARNESS_TEST_DIRECTORY SHARNESS_BUILD_DIRECTORY

if test -z "$SHARNESS_SH"; then
	for eg_candidate in \
		"$EG_SHARNESS_DIR/sharness.sh" \
		/usr/share/sharness/sharness.sh \
		/usr/local/share/sharness/sharness.sh
	do
		if test -f "$eg_candidate"; then
			SHARNESS_SH=$eg_candidate
			break
		fi
	done
fi
if test -z "$SHARNESS_SH" || ! test -f "$SHARNESS_SH"; then
	echo "Bail out! sharness.sh not found: install sharness" \
		"(Debian: apt install sharness) or set SHARNESS_SH"
	exit 1
fi
export SHARNESS_SH

run_under_flux() {
	eg_size=${1:-1}
	eg_cores=${EG_CORES:-4}
	test $# -gt 0 && shift
	if test -n "$EG_UNDER_FLUX"; then
		if test -z "$FLUX_URI"; then
			echo "Bail out! EG_UNDER_FLUX is set but FLUX_URI is not"
			exit 1
		fi
		return 0
	fi
	if ! command -v flux >/dev/null 2>&1; then
		echo "Bail out! 'flux' is not on PATH: flux-core is a prerequisite"
		exit 1
	fi
	if ! command -v flux-epilog-gate >/dev/null 2>&1; then
		echo "Bail out! 'flux-epilog-gate' is not on PATH:" \
			"run 'make sharness' or put the virtualenv's bin first"
		exit 1
	fi

	eg_dir=$(mktemp -d "${TMPDIR:-/tmp}/epilog-gate-sharness.XXXXXX") ||
		exit 1
	mkdir "$eg_dir/conf" "$eg_dir/state" || exit 1
	if test "$eg_size" -gt 1; then
		eg_ranks="0-$((eg_size - 1))"
	else
		eg_ranks=0
	fi
	flux R encode --ranks="$eg_ranks" --cores="0-$((eg_cores - 1))" \
		>"$eg_dir/R.json" || {
		echo "Bail out! flux R encode failed"
		exit 1
	}
	cat >"$eg_dir/conf/resource.toml" <<-EOF
	[resource]
	noverify = true
	path = "$eg_dir/R.json"
	EOF

	# Keep the instance directory when sharness keeps its trash (-d).
	eg_keep=
	for eg_arg in "$@"; do
		case "$eg_arg" in
		-d|--d|--de|--deb|--debu|--debug) eg_keep=t ;;
		esac
	done

	# The trash directory goes inside the instance directory (--root):
	# concurrent runs of the suite from one checkout never share one.
	unset FLUX_URI
	EG_UNDER_FLUX=t \
	EG_INSTANCE_DIR="$eg_dir" \
	EG_CONF_DIR="$eg_dir/conf" \
	flux start --test-size="$eg_size" \
		--config-path="$eg_dir/conf" \
		-Sstatedir="$eg_dir/state" \
		-Slog-filename="$eg_dir/broker.log" \
		-Slog-stderr-level=1 \
		"${SHELL_PATH:-/bin/sh}" "$0" "$@" --root="$eg_dir"
	eg_rc=$?
	if test $eg_rc -eq 0 && test -z "$eg_keep"; then
		rm -rf "$eg_dir"
	else
		echo "# $(basename "$0"): instance kept in $eg_dir" \
			"(broker.log, trash directory)" >&2
	fi
	exit $eg_rc
}

# Helpers for the tests (available inside the instance).

# Entries of the hold log (KVS key $HOLD_LOG) that record a pending hold
# and its cancellation (see doc/man7/flux-epilog-gate.rst, DURABILITY).
HOLD_EVENT=epilog_gate.hold
CANCEL_EVENT=epilog_gate.cancel
HOLD_LOG=epilog-gate.holds

# hold_logged ID DESCRIPTION EVENT: wait (up to 5s) until the hold log
# has entry EVENT for hold DESCRIPTION of job ID; then print the entry.
hold_logged() {
	local entry="\"name\":\"$3\",\"context\":{\"id\":$(flux job id $1),\"description\":\"$2\""
	for i in $(seq 50); do
		flux kvs get $HOLD_LOG 2>/dev/null | grep -F "$entry" && return 0
		sleep 0.1
	done
	return 1
}

# Load the installed plugin with load options "$@".
gate_load() {
	flux jobtap load "$(flux-epilog-gate path)" "$@"
}

# Submit a job that stays pending (urgency hold); print its id.
pending_job() {
	flux submit --urgency=hold true
}

# Submit a job and wait until it runs; print its id.
running_job() {
	flux submit --wait-event=start sleep 300
}

# Wait (at most 10 s) for event $2 in job $1's eventlog.
wait_event() {
	flux job wait-event --timeout=10 "$1" "$2" >/dev/null
}

# Print the names of job $1's events, one a line.
event_names() {
	flux job eventlog "$1" | awk '{ print $2 }'
}

# Print job $1's state name (SCHED, RUN, CLEANUP, INACTIVE...).
job_state() {
	flux jobs -no "{state}" "$1"
}

# Print (compact JSON) what jq filter $1 selects from
# `flux jobtap query epilog-gate.so`.
gate_query() {
	flux jobtap query epilog-gate.so | jq -c "$1"
}
