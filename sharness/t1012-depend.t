#!/bin/sh

test_description='flux-epilog-gate hold --depend keeps a job in DEPEND until released'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

# Set jobid to a job kept in DEPEND by an afterany dependency on job
# holder, held by urgency 0.
depend_job() {
	holder=$(flux submit --urgency=hold true) &&
	jobid=$(flux submit --dependency=afterany:$holder true)
}

test_expect_success 'load the plugin' '
	gate_load
'
test_expect_success 'hold --depend on a job in DEPEND prints the hold, active' '
	depend_job &&
	wait_event $jobid dependency-add &&
	flux-epilog-gate hold --depend $jobid stage-in >hold.out &&
	echo "$(flux job id --to=f58 $jobid) stage-in active" >hold.exp &&
	test_cmp hold.exp hold.out
'
test_expect_success 'list shows the depend point' '
	flux-epilog-gate hold -q $jobid teardown &&
	flux-epilog-gate list >list.out &&
	test_debug "cat list.out" &&
	head -1 list.out | grep "STATE *POINT" &&
	grep "stage-in *active *depend" list.out &&
	grep "teardown *pending *epilog" list.out &&
	flux-epilog-gate list --json | jq -e "map(.point) | sort == [\"depend\", \"epilog\"]"
'
test_expect_success 'watch --point depend prints the active dependency hold' '
	timeout 20 flux-epilog-gate watch --point depend -c 1 >watch.out &&
	test_debug "cat watch.out" &&
	echo "$(flux job id --to=f58 $jobid) stage-in userid=$(id -u) never-ran depend" \
		>watch.exp &&
	test_cmp watch.exp watch.out
'
test_expect_success 'flux jobtap query shows the depend point' '
	gate_query ".holds | map(select(.description == \"stage-in\")) | .[0].point" \
		>query.out &&
	test "$(cat query.out)" = "\"depend\""
'
test_expect_success 'the job stays in DEPEND once its other dependency is gone' '
	flux cancel $holder &&
	wait_event $holder clean &&
	sleep 0.5 &&
	test "$(job_state $jobid)" = "DEPEND"
'
test_expect_success 'release lets it run; its epilog hold then holds clean' '
	flux-epilog-gate release $jobid stage-in &&
	wait_event $jobid start &&
	wait_event $jobid epilog-start &&
	flux-epilog-gate release $jobid teardown &&
	wait_event $jobid clean &&
	event_names $jobid >events.out &&
	test "$(grep -n -x dependency-remove events.out | tail -1 | cut -d: -f1)" -lt \
		"$(grep -n -x depend events.out | cut -d: -f1)"
'
test_expect_success 'hold --depend on a job past DEPEND is refused as too late' '
	jobid=$(pending_job) &&
	test_must_fail flux-epilog-gate hold --depend $jobid late 2>late.err &&
	test_debug "cat late.err" &&
	grep "too late for a dependency hold" late.err &&
	test "$(flux-epilog-gate list $jobid --json)" = "[]" &&
	flux cancel $jobid
'
test_expect_success 'hold takes --depend or --prolog, not both' '
	test_must_fail flux-epilog-gate hold --depend --prolog 1 x 2>both.err &&
	grep "not allowed with" both.err
'
test_expect_success 'a failed dependency hold fails the job: it never runs' '
	depend_job &&
	wait_event $jobid dependency-add &&
	flux-epilog-gate hold -q --depend $jobid stage-in &&
	flux-epilog-gate release --status 2 $jobid stage-in &&
	wait_event $jobid clean &&
	flux job eventlog $jobid | grep "exception.*type=\"dependency\".*stage-in" &&
	! event_names $jobid | grep -x alloc &&
	flux cancel $holder
'
test_done
