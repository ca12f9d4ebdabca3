#!/bin/sh

test_description='flux-epilog-gate path, hold, list and release as an admin uses them'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

test_expect_success 'path prints the installed plugin, an existing .so' '
	flux-epilog-gate path >path.out &&
	test_debug "cat path.out" &&
	test $(wc -l <path.out) -eq 1 &&
	grep "/epilog-gate\.so$" path.out &&
	test -f "$(cat path.out)"
'
test_expect_success 'flux jobtap load $(flux-epilog-gate path) loads the plugin' '
	flux jobtap load $(flux-epilog-gate path) &&
	flux jobtap list >plugins.out &&
	grep "^epilog-gate\.so$" plugins.out
'
test_expect_success 'hold on a pending job prints the hold, state pending' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold $jobid bb-teardown >hold.out &&
	test_debug "cat hold.out" &&
	echo "$(flux job id --to=f58 $jobid) bb-teardown pending" >hold.exp &&
	test_cmp hold.exp hold.out
'
test_expect_success 'a pending hold is recorded in the hold log, not the eventlog' '
	hold_logged $jobid bb-teardown $HOLD_EVENT &&
	flux job eventlog $jobid >eventlog.out &&
	test_must_fail grep -F bb-teardown eventlog.out
'
test_expect_success 'holding the same description again answers the existing hold' '
	flux-epilog-gate hold $jobid bb-teardown >hold2.out &&
	test_cmp hold.exp hold2.out &&
	test $(hold_logged $jobid bb-teardown $HOLD_EVENT | wc -l) -eq 1
'
test_expect_success 'hold -q prints nothing' '
	flux-epilog-gate hold -q $jobid unmount >quiet.out &&
	test_must_be_empty quiet.out
'
test_expect_success 'list shows both holds of the job, pending' '
	flux-epilog-gate list >list.out &&
	test_debug "cat list.out" &&
	head -1 list.out | grep "^JOBID *DESCRIPTION *STATE" &&
	grep "bb-teardown *pending" list.out &&
	grep "unmount *pending" list.out &&
	test $(wc -l <list.out) -eq 3
'
test_expect_success 'list --json prints the holds as a JSON array' '
	flux-epilog-gate list --json >list.json &&
	test_debug "jq . list.json" &&
	jq -e "length == 2" list.json &&
	jq -e "map(.id) | unique == [$(flux job id $jobid)]" list.json &&
	jq -e "map(.description) | sort == [\"bb-teardown\", \"unmount\"]" \
		list.json &&
	jq -e "all(.state == \"pending\" and .userid == $(id -u))" list.json &&
	jq -e "all(has(\"t_hold\") and (has(\"t_start\") | not))" list.json
'
test_expect_success 'list JOBID accepts any job id form' '
	flux-epilog-gate list --json $(flux job id --to=dec $jobid) >byid.json &&
	jq -e "length == 2" byid.json &&
	flux-epilog-gate list --json $(flux job id --to=words $jobid) >byw.json &&
	jq -e "length == 2" byw.json
'
test_expect_success 'releasing a pending hold cancels it with no epilog events' '
	hold_logged $jobid unmount $HOLD_EVENT &&
	flux-epilog-gate release $jobid unmount &&
	hold_logged $jobid unmount $CANCEL_EVENT &&
	flux job eventlog $jobid >cancelled.out &&
	test_must_fail grep "epilog-start" cancelled.out &&
	flux-epilog-gate list --json $jobid | jq -e "length == 1"
'
test_expect_success 'cancelling the pending job posts epilog-start and holds clean' '
	flux cancel $jobid &&
	wait_event $jobid epilog-start &&
	test "$(job_state $jobid)" = CLEANUP &&
	event_names $jobid >held.out &&
	test_must_fail grep "^clean$" held.out
'
test_expect_success 'list shows the hold active, with its start time' '
	flux-epilog-gate list --json $jobid >active.json &&
	jq -e ".[0] | .state == \"active\" and has(\"t_start\")" active.json
'
test_expect_success 'release posts epilog-finish; the job goes inactive' '
	flux-epilog-gate release $jobid bb-teardown &&
	wait_event $jobid clean &&
	test "$(job_state $jobid)" = INACTIVE
'
test_expect_success 'eventlog shows epilog-start, then epilog-finish, then clean' '
	event_names $jobid | grep -E "^(epilog-start|epilog-finish|clean)$" \
		>order.out &&
	cat >order.exp <<-EOF &&
	epilog-start
	epilog-finish
	clean
	EOF
	test_cmp order.exp order.out &&
	flux job eventlog $jobid |
		grep "epilog-finish description=\"bb-teardown\" status=0"
'
test_expect_success 'a release of a status 0 raises no exception' '
	flux job eventlog $jobid >ok.out &&
	test_must_fail grep "exception type=\"epilog\"" ok.out
'
test_expect_success 'a late release succeeds, says nothing to release, exits 0' '
	flux-epilog-gate release $jobid bb-teardown 2>late.err &&
	test_debug "cat late.err" &&
	grep "nothing to release" late.err
'
test_expect_success 'release --status 3 posts epilog-finish status=3' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q $jobid license &&
	flux cancel $jobid &&
	wait_event $jobid epilog-start &&
	flux-epilog-gate release --status 3 $jobid license &&
	wait_event $jobid clean &&
	flux job eventlog $jobid >status.out &&
	test_debug "cat status.out" &&
	grep "epilog-finish description=\"license\" status=3" status.out
'
test_expect_success 'release --status 3 raises a non-fatal epilog exception naming the hold' '
	grep "exception type=\"epilog\" severity=1" status.out >exc.out &&
	grep "license" exc.out &&
	grep "status 3" exc.out
'
test_expect_success 'a hold timeout finishes it with status 124 and an exception' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q --timeout=0.2 $jobid slow &&
	flux cancel $jobid &&
	wait_event $jobid clean &&
	flux job eventlog $jobid >timeout.out &&
	test_debug "cat timeout.out" &&
	grep "epilog-finish description=\"slow\" status=124" timeout.out &&
	grep "exception type=\"epilog\" severity=1.*slow.*timed out" timeout.out
'
test_expect_success 'a hold on a running job becomes active only at finish' '
	jobid=$(running_job) &&
	flux-epilog-gate hold -q $jobid stage-out &&
	flux-epilog-gate list --json $jobid | jq -e ".[0].state == \"pending\"" &&
	flux cancel $jobid &&
	wait_event $jobid epilog-start &&
	event_names $jobid | grep -E "^(finish|epilog-start)$" >ran.out &&
	printf "finish\nepilog-start\n" >ran.exp &&
	test_cmp ran.exp ran.out &&
	flux-epilog-gate release $jobid stage-out &&
	wait_event $jobid clean
'

# Errors: a clear message on stderr, a non-zero exit, nothing changed.

# The plugin writes job ids in F58 with the prefix of the broker'"'"'s locale
# ("ƒ" or "f"): match the base58 digits only.
test_expect_success 'hold on an unknown job fails naming the job' '
	unknown=$(flux job id --to=f58 123456789) &&
	digits=$(flux job id --to=f58 123456789 | cut -c2-) &&
	test_must_fail flux-epilog-gate hold $unknown x 2>unknown.err &&
	test_debug "cat unknown.err" &&
	grep "^flux-epilog-gate: unknown job .*$digits$" unknown.err
'
test_expect_success 'release on an unknown job fails naming the job' '
	test_must_fail flux-epilog-gate release $unknown x 2>unknown2.err &&
	grep "unknown job .*$digits$" unknown2.err
'
test_expect_success 'hold on an inactive job fails' '
	test_must_fail flux-epilog-gate hold $jobid late 2>inactive.err &&
	test_debug "cat inactive.err" &&
	grep "inactive" inactive.err
'
test_expect_success 'hold with a bad description fails, saying what is allowed' '
	jobid=$(pending_job) &&
	test_must_fail flux-epilog-gate hold $jobid "bad desc" 2>desc.err &&
	test_debug "cat desc.err" &&
	grep "bad desc" desc.err &&
	grep "letters, digits" desc.err &&
	flux-epilog-gate list --json $jobid | jq -e "length == 0"
'
test_expect_success 'hold with a description of 65 characters fails' '
	long=$(printf "%065d" 0) &&
	test_must_fail flux-epilog-gate hold $jobid $long 2>long.err &&
	grep "longer than 64" long.err
'
test_expect_success 'hold with a timeout of 0 fails naming the timeout' '
	test_must_fail flux-epilog-gate hold --timeout=0 $jobid x 2>t0.err &&
	test_debug "cat t0.err" &&
	grep "timeout" t0.err
'
test_expect_success 'release of a description the job does not hold names its holds' '
	flux-epilog-gate hold -q $jobid present &&
	test_must_fail flux-epilog-gate release $jobid absent 2>absent.err &&
	test_debug "cat absent.err" &&
	grep "absent" absent.err &&
	grep "present" absent.err
'
test_expect_success 'a malformed job id is a usage error (exit 2)' '
	test_expect_code 2 flux-epilog-gate hold "not!a-job" x 2>badid.err &&
	grep "invalid job id" badid.err
'
test_expect_success 'a missing argument is a usage error (exit 2)' '
	test_expect_code 2 flux-epilog-gate release $jobid 2>usage.err &&
	grep "^usage: flux-epilog-gate release" usage.err
'

# Access: hold and release are for the instance owner; a guest lists only
# holds on its own jobs.  FLUX_HANDLE_USERID/ROLEMASK make the owner's
# connection look like a guest's (allowed for the instance owner).

as_guest() {
	FLUX_HANDLE_USERID=9999 FLUX_HANDLE_ROLEMASK=0x2 "$@"
}

test_expect_success 'a guest may not hold (EPERM message)' '
	test_must_fail as_guest flux-epilog-gate hold $jobid guest 2>guest.err &&
	test_debug "cat guest.err" &&
	grep "only the instance owner may hold" guest.err
'
test_expect_success 'a guest may not release' '
	test_must_fail as_guest flux-epilog-gate release $jobid present \
		2>guest2.err &&
	grep "only the instance owner may release" guest2.err &&
	flux-epilog-gate list --json $jobid | jq -e "length == 1"
'
test_expect_success 'a guest lists no holds of jobs it does not own' '
	as_guest flux-epilog-gate list --json >guest.json &&
	jq -e "length == 0" guest.json
'
test_expect_success 'a guest may not snapshot the hold log' '
	test_must_fail as_guest flux-epilog-gate snapshot 2>guest3.err &&
	grep "only the instance owner may snapshot" guest3.err
'
test_expect_success 'snapshot prints the size of the hold log it wrote' '
	flux-epilog-gate snapshot >snapshot.out &&
	test_debug "cat snapshot.out" &&
	flux kvs get --raw epilog-gate.holds >log.raw &&
	echo "hold log: $(wc -c <log.raw) bytes" >snapshot.exp &&
	test_cmp snapshot.exp snapshot.out
'
test_expect_success 'after a snapshot the hold log still has the hold' '
	hold_logged $jobid present $HOLD_EVENT
'
test_expect_success 'cleanup: release the remaining hold, cancel the job' '
	flux cancel $jobid &&
	flux-epilog-gate release $jobid present &&
	wait_event $jobid clean
'

test_done
