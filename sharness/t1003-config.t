#!/bin/sh

test_description='the [epilog-gate] table of the instance config and flux config reload'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

# Write the [epilog-gate] table (lines on stdin) to the instance config.
gate_config() {
	{ echo "[epilog-gate]"; cat; } >"$EG_CONF_DIR/epilog-gate.toml"
}

test_expect_success 'loaded without options and no table, there is no timeout' '
	gate_load &&
	gate_query .config.timeout >none.out &&
	echo null >none.exp &&
	test_cmp none.exp none.out
'
test_expect_success 'flux config reload applies [epilog-gate] timeout' '
	gate_config <<-EOF &&
	timeout = "10m"
	EOF
	flux config reload &&
	test "$(gate_query .config.timeout)" = 600
'
test_expect_success 'a new hold gets the configured timeout' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q $jobid bb-teardown &&
	flux-epilog-gate list --json $jobid | jq -e ".[0].timeout == 600"
'
test_expect_success 'a bad value makes flux config reload fail naming the key' '
	gate_config <<-EOF &&
	timeout = "soon"
	EOF
	test_must_fail flux config reload 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "epilog-gate: timeout:" reload.err
'
test_expect_success 'the failed reload kept the old configuration' '
	test "$(gate_query .config.timeout)" = 600 &&
	flux config get epilog-gate >kept.json &&
	jq -e ".timeout == \"10m\"" kept.json
'
test_expect_success 'an unknown key makes flux config reload fail naming it' '
	gate_config <<-EOF &&
	timeout = "10m"
	tiemout = "5m"
	EOF
	test_must_fail flux config reload 2>unknown.err &&
	test_debug "cat unknown.err" &&
	grep "epilog-gate: tiemout:" unknown.err &&
	test "$(gate_query .config.timeout)" = 600
'
test_expect_success 'max-holds out of range makes reload fail naming it' '
	gate_config <<-EOF &&
	max-holds = 100000
	EOF
	test_must_fail flux config reload 2>max.err &&
	test_debug "cat max.err" &&
	grep "epilog-gate: max-holds:" max.err
'
test_expect_success 'removing the table and reloading goes back to the defaults' '
	rm "$EG_CONF_DIR/epilog-gate.toml" &&
	flux config reload &&
	gate_query .config >defaults.json &&
	test_debug "cat defaults.json" &&
	jq -e ".timeout == null and .\"max-holds\" == 64" defaults.json
'
test_expect_success 'a reload leaves the timeout of existing holds alone' '
	flux-epilog-gate list --json $jobid | jq -e ".[0].timeout == 600"
'
test_expect_success 'load options take precedence over the table' '
	gate_config <<-EOF &&
	timeout = "10m"
	EOF
	flux config reload &&
	flux jobtap remove epilog-gate.so &&
	gate_load timeout=30 &&
	test "$(gate_query .config.timeout)" = 30 &&
	flux config reload &&
	test "$(gate_query .config.timeout)" = 30
'
test_expect_success 'a configured timeout finishes a hold with status 124' '
	flux jobtap remove epilog-gate.so &&
	gate_config <<-EOF &&
	timeout = 0.3
	EOF
	flux config reload &&
	gate_load &&
	test "$(gate_query .config.timeout)" = 0.3 &&
	other=$(pending_job) &&
	flux-epilog-gate hold -q $other short &&
	flux cancel $other &&
	wait_event $other clean &&
	flux job eventlog $other >short.out &&
	test_debug "cat short.out" &&
	grep "epilog-finish description=\"short\" status=124" short.out &&
	grep "exception type=\"epilog\" severity=1.*short" short.out
'
test_expect_success 'cleanup: release the remaining hold' '
	flux cancel $jobid &&
	flux-epilog-gate release $jobid bb-teardown &&
	wait_event $jobid clean
'
test_expect_success 'an instance whose table is bad starts, the gate loaded with defaults' '
	mkdir -p badconf &&
	cat >badconf/gate.toml <<-EOF &&
	[job-manager]
	plugins = [ { load = "$(flux-epilog-gate path)" } ]
	[epilog-gate]
	timeout = "10 minutes"
	EOF
	flux start --config-path=badconf \
		sh -c "flux jobtap query epilog-gate.so; flux dmesg" >badstart.out &&
	test_debug "cat badstart.out" &&
	grep "\"config_error\": *\"timeout: .10 minutes." badstart.out &&
	grep "job-manager.err.*epilog-gate: timeout: .10 minutes.*defaults" badstart.out
'
test_expect_success 'a table value a load option overrides is checked all the same' '
	flux jobtap remove epilog-gate.so &&
	gate_config </dev/null &&
	flux config reload &&
	gate_load max-holds=10 &&
	gate_config <<-EOF &&
	max-holds = 0
	EOF
	test_must_fail flux config reload 2>shadow.err &&
	test_debug "cat shadow.err" &&
	grep "epilog-gate: max-holds: 0 is not between 1 and 200 (in \[epilog-gate\]" shadow.err
'

test_done
