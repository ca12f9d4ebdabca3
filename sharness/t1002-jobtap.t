#!/bin/sh

test_description='epilog-gate.so under flux jobtap: load options, query, remove and load'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

test_expect_success 'load with a bad timeout fails naming the key' '
	test_must_fail gate_load timeout=abc 2>timeout.err &&
	test_debug "cat timeout.err" &&
	grep "epilog-gate: timeout:" timeout.err
'
test_expect_success 'load with an unknown option fails naming the key' '
	test_must_fail gate_load no-such-key=1 2>unknown.err &&
	test_debug "cat unknown.err" &&
	grep "epilog-gate: no-such-key: unknown" unknown.err
'
test_expect_success 'load with max-holds out of range fails naming the key' '
	test_must_fail gate_load max-holds=0 2>max.err &&
	test_debug "cat max.err" &&
	grep "epilog-gate: max-holds:" max.err
'
test_expect_success 'a failed load leaves no plugin loaded' '
	flux jobtap list >plugins.out &&
	test_must_fail grep epilog-gate plugins.out
'
test_expect_success 'load with options applies them' '
	gate_load timeout=10m max-holds=2 &&
	gate_query .config >config.json &&
	test_debug "cat config.json" &&
	jq -e ".timeout == 600 and .\"max-holds\" == 2" config.json
'
test_expect_success 'flux jobtap query | jq shows name, config, counters and holds' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q $jobid bb-teardown &&
	flux jobtap query epilog-gate.so >query.json &&
	test_debug "jq -S . query.json" &&
	jq -e ".name == \"epilog-gate.so\"" query.json &&
	jq -e ".path == \"$(flux-epilog-gate path)\"" query.json &&
	jq -e ".counters.held == 1 and .counters.holds == 1" query.json &&
	jq -e ".holds | length == 1" query.json &&
	jq -e ".holds[0].id == $(flux job id $jobid)" query.json &&
	jq -e ".holds[0].description == \"bb-teardown\"" query.json &&
	jq -e ".holds[0].state == \"pending\"" query.json
'
test_expect_success 'the timeout load option is the default timeout of a hold' '
	jq -e ".holds[0].timeout == 600" query.json
'
test_expect_success 'more holds than max-holds on one job fail naming max-holds' '
	flux-epilog-gate hold -q $jobid two &&
	test_must_fail flux-epilog-gate hold $jobid three 2>three.err &&
	test_debug "cat three.err" &&
	grep "max-holds=2" three.err &&
	flux-epilog-gate release $jobid two
'
test_expect_success 'flux jobtap remove epilog-gate.so removes the service' '
	flux jobtap remove epilog-gate.so &&
	test_must_fail flux-epilog-gate list 2>removed.err &&
	test_debug "cat removed.err"
'
test_expect_success 'load again: the pending hold is listed again' '
	gate_load &&
	flux-epilog-gate list --json >reloaded.json &&
	test_debug "cat reloaded.json" &&
	jq -e "length == 1" reloaded.json &&
	jq -e ".[0] | .description == \"bb-teardown\" and .state == \"pending\"" \
		reloaded.json
'
test_expect_success 'after the reload the hold still becomes active and holds clean' '
	flux cancel $jobid &&
	wait_event $jobid epilog-start &&
	test "$(job_state $jobid)" = CLEANUP &&
	flux-epilog-gate list --json $jobid | jq -e ".[0].state == \"active\""
'
test_expect_success 'an active hold survives remove and load too, and still blocks clean' '
	flux jobtap remove epilog-gate.so &&
	gate_load &&
	flux-epilog-gate list --json $jobid | jq -e ".[0].state == \"active\"" &&
	test "$(job_state $jobid)" = CLEANUP
'
test_expect_success 'the hold is releasable after the reload' '
	flux-epilog-gate release $jobid bb-teardown &&
	wait_event $jobid clean &&
	test $(event_names $jobid | grep -c "^epilog-finish$") -eq 1
'
test_expect_success 'a hold timeout still applies after remove and load' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q --timeout=1 $jobid slow &&
	flux cancel $jobid &&
	wait_event $jobid epilog-start &&
	flux jobtap remove epilog-gate.so &&
	gate_load &&
	wait_event $jobid clean &&
	flux job eventlog $jobid >slow.out &&
	test_debug "cat slow.out" &&
	grep "epilog-finish description=\"slow\" status=124" slow.out
'
test_expect_success 'the counters, kept across the reloads, count the timeout as failed' '
	gate_query .counters >counters.json &&
	test_debug "cat counters.json" &&
	jq -e ".timedout == 1 and .failed == 1" counters.json &&
	jq -e ".held == 3 and .holds == 0 and .jobs == 0" counters.json
'

test_done
