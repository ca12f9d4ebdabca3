#!/bin/sh

test_description='flux-epilog-gate watch prints holds as they become active'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

# Wait until the plugin counts $1 watchers (at most 10 s).
wait_watchers() {
	i=0
	while test "$(gate_query .counters.watchers)" != "$1"; do
		i=$((i + 1))
		test $i -lt 100 || return 1
		sleep 0.1
	done
}

test_expect_success 'load the plugin' '
	gate_load
'
test_expect_success 'watch -c 1 prints a hold when it becomes active, then exits' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q $jobid bb-teardown &&
	{ timeout 20 flux-epilog-gate watch -c 1 >watch.out & } &&
	pid=$! &&
	wait_watchers 1 &&
	test_must_be_empty watch.out &&
	flux cancel $jobid &&
	wait $pid &&
	test_debug "cat watch.out" &&
	echo "$(flux job id --to=f58 $jobid) bb-teardown userid=$(id -u) never-ran" \
		>watch.exp &&
	test_cmp watch.exp watch.out
'
test_expect_success 'a watcher that went away is dropped' '
	wait_watchers 0
'
test_expect_success 'watch first prints holds that are already active' '
	timeout 20 flux-epilog-gate watch -c 1 >already.out &&
	test_cmp watch.exp already.out
'
test_expect_success 'watch --json prints {id, description, userid, ran}' '
	timeout 20 flux-epilog-gate watch --json -c 1 >watch.json &&
	test_debug "cat watch.json" &&
	jq -e ".id == $(flux job id $jobid)" watch.json &&
	jq -e ".description == \"bb-teardown\"" watch.json &&
	jq -e ".userid == $(id -u) and .ran == false" watch.json &&
	flux-epilog-gate release $jobid bb-teardown &&
	wait_event $jobid clean
'
test_expect_success 'watch DESCRIPTION prints only holds of that description' '
	other=$(pending_job) &&
	wanted=$(pending_job) &&
	flux-epilog-gate hold -q $other unmount &&
	flux-epilog-gate hold -q $wanted stage-out &&
	{ timeout 20 flux-epilog-gate watch -c 1 stage-out >filter.out & } &&
	pid=$! &&
	wait_watchers 1 &&
	flux cancel $other &&
	wait_event $other epilog-start &&
	flux cancel $wanted &&
	wait $pid &&
	test_debug "cat filter.out" &&
	test $(wc -l <filter.out) -eq 1 &&
	grep " stage-out " filter.out
'
test_expect_success 'watch says ran for a job that started' '
	jobid=$(running_job) &&
	flux-epilog-gate hold -q $jobid copy-back &&
	{ timeout 20 flux-epilog-gate watch -c 1 --json copy-back >ran.json & } &&
	pid=$! &&
	wait_watchers 1 &&
	flux cancel $jobid &&
	wait $pid &&
	test_debug "cat ran.json" &&
	jq -e ".id == $(flux job id $jobid) and .ran == true" ran.json
'
test_expect_success 'watch with a bad description fails with a clear message' '
	test_must_fail flux-epilog-gate watch "no spaces" 2>bad.err &&
	test_debug "cat bad.err" &&
	grep "no spaces" bad.err
'
test_expect_success 'cleanup: release every hold' '
	flux-epilog-gate release $other unmount &&
	flux-epilog-gate release $wanted stage-out &&
	flux-epilog-gate release $jobid copy-back &&
	flux-epilog-gate list --json | jq -e "length == 0"
'

test_done
