#!/bin/sh

test_description='the dws plugin as a site admin loads it: path, load, query, remove'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

test_expect_success 'flux-epilog-gate path dws prints the installed dws.so' '
	flux-epilog-gate path dws >dws.path &&
	test_debug "cat dws.path" &&
	test "$(basename $(cat dws.path))" = dws.so &&
	test -f "$(cat dws.path)" &&
	test "$(flux-epilog-gate path)" != "$(cat dws.path)"
'
test_expect_success 'flux-epilog-gate path of an unknown plugin is a usage error' '
	test_expect_code 2 flux-epilog-gate path nosuch 2>path.err &&
	test_debug "cat path.err" &&
	grep "nosuch" path.err
'
test_expect_success 'load without options logs the default epilog timeout' '
	flux dmesg --clear &&
	flux jobtap load "$(flux-epilog-gate path dws)" &&
	flux dmesg >load.log &&
	grep "dws: epilog timeout = 0.000s" load.log &&
	flux jobtap list | grep "^dws"
'
test_expect_success 'flux jobtap query shows the epilog timeout' '
	flux jobtap query dws.so >query.json &&
	test_debug "jq -S . query.json" &&
	jq -e ".\"epilog-timeout\" == 0" query.json
'
test_expect_success 'a job without a dw attribute is left alone' '
	jobid=$(flux submit --wait true) &&
	flux job eventlog $jobid >plain.log &&
	test_must_fail grep dws plain.log
'
test_expect_success 'a bad epilog-timeout fails the load naming the key' '
	flux jobtap remove dws.so &&
	test_must_fail flux jobtap load "$(flux-epilog-gate path dws)" \
		epilog-timeout=soon 2>bad.err &&
	test_debug "cat bad.err" &&
	grep "dws: epilog-timeout" bad.err &&
	test_must_fail flux jobtap query dws.so
'

test_done
