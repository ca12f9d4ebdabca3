#!/bin/sh

test_description='flux-epilog-gate hold --prolog holds a job start until released'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

test_expect_success 'load the plugin' '
	gate_load
'
test_expect_success 'hold --prolog on a pending job prints the hold, pending' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold --prolog $jobid bb-setup >hold.out &&
	echo "$(flux job id --to=f58 $jobid) bb-setup pending" >hold.exp &&
	test_cmp hold.exp hold.out
'
test_expect_success 'list shows the point of each hold' '
	flux-epilog-gate hold -q $jobid bb &&
	flux-epilog-gate list >list.out &&
	test_debug "cat list.out" &&
	head -1 list.out | grep "STATE *POINT" &&
	grep "bb-setup *pending *prolog" list.out &&
	grep "bb  *pending *epilog" list.out &&
	flux-epilog-gate list --json | jq -e "map(.point) | sort == [\"epilog\", \"prolog\"]"
'
test_expect_success 'watch --point prolog prints the prolog hold when the job enters RUN' '
	{ timeout 20 flux-epilog-gate watch --point prolog -c 1 >watch.out & } &&
	pid=$! &&
	while test "$(gate_query .counters.watchers)" != "1"; do sleep 0.1; done &&
	flux job urgency $jobid default &&
	wait $pid &&
	test_debug "cat watch.out" &&
	echo "$(flux job id --to=f58 $jobid) bb-setup userid=$(id -u) never-ran prolog" \
		>watch.exp &&
	test_cmp watch.exp watch.out
'
test_expect_success 'the job does not start while its prolog hold is active' '
	wait_event $jobid prolog-start &&
	sleep 0.5 &&
	test "$(job_state $jobid)" = "RUN" &&
	! event_names $jobid | grep -x start
'
test_expect_success 'release starts the job; its epilog hold then holds clean' '
	flux-epilog-gate release $jobid bb-setup &&
	wait_event $jobid start &&
	flux-epilog-gate release $jobid bb &&
	wait_event $jobid clean &&
	event_names $jobid >events.out &&
	test "$(grep -n -x prolog-finish events.out | cut -d: -f1)" -lt \
		"$(grep -n -x start events.out | cut -d: -f1)"
'
test_expect_success 'hold --prolog on a running job is refused as too late' '
	jobid=$(running_job) &&
	test_must_fail flux-epilog-gate hold --prolog $jobid late 2>late.err &&
	test_debug "cat late.err" &&
	grep "too late for a prolog hold" late.err &&
	test "$(flux-epilog-gate list $jobid --json)" = "[]" &&
	flux cancel $jobid
'
test_expect_success 'a failed prolog hold fails the job: it never starts' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q --prolog $jobid bb-setup &&
	flux job urgency $jobid default &&
	wait_event $jobid prolog-start &&
	flux-epilog-gate release --status 2 $jobid bb-setup &&
	wait_event $jobid clean &&
	flux job eventlog $jobid | grep "exception.*type=\"prolog\".*bb-setup" &&
	! event_names $jobid | grep -x start
'
test_done
