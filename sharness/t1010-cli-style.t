#!/bin/sh

test_description='flux-epilog-gate in the flux house style: durations, list formats and filters, release of many holds, exit codes, a closed pipe'

. "$(dirname "$0")/sharness-flux.sh"
run_under_flux 1 "$@"
. "$SHARNESS_SH"

long=$(printf "d%.0s" $(seq 64))

# Exit status of "$@" whose standard output is a pipe closed before the
# command writes to it; its standard error goes to pipe.err.
closed_pipe_status() {
	{ sleep 1; "$@" 2>pipe.err; echo $? >pipe.rc; } | true
	cat pipe.rc
}

test_expect_success 'load with a timeout JSON cannot carry fails naming the key' '
	test_must_fail flux-epilog-gate load timeout=1e309 2>load.err &&
	test_debug "cat load.err" &&
	grep "^flux-epilog-gate: timeout: .1e309. is infinite" load.err &&
	flux jobtap list >plugins.out &&
	test_must_fail grep "^epilog-gate\.so$" plugins.out
'
test_expect_success 'load with a bad value fails naming the key and loads nothing' '
	test_must_fail flux-epilog-gate load max-holds=0 2>max.err &&
	grep "^flux-epilog-gate: max-holds: 0 is not between" max.err &&
	flux jobtap list >plugins.out &&
	test_must_fail grep "^epilog-gate\.so$" plugins.out
'
test_expect_success 'load KEY=VALUE loads the plugin with those options' '
	flux-epilog-gate load timeout=10m annotate=true &&
	test "$(gate_query .config.timeout)" = 600 &&
	test "$(gate_query .config.annotate)" = true
'
test_expect_success 'hold --timeout takes a Flux Standard Duration' '
	jobid=$(pending_job) &&
	flux-epilog-gate hold -q --timeout 10m $jobid bb &&
	flux-epilog-gate hold -q -t 1.5h $jobid stage-out &&
	flux-epilog-gate hold -q -t 500ms $jobid fast &&
	flux-epilog-gate list --json $jobid >fsd.json &&
	jq -e "map({(.description): .timeout}) | add ==
		{\"bb\": 600, \"stage-out\": 5400, \"fast\": 0.5}" fsd.json
'
test_expect_success 'hold --timeout nan is a usage error that says not a number' '
	test_expect_code 2 flux-epilog-gate hold -t nan $jobid x 2>nan.err &&
	test_debug "cat nan.err" &&
	grep "timeout: .nan. is not a number" nan.err
'
test_expect_success 'hold --timeout inf and 1e309 say the timeout is infinite' '
	test_expect_code 2 flux-epilog-gate hold -t inf $jobid x 2>inf.err &&
	grep "timeout: .inf. is infinite" inf.err &&
	test_expect_code 2 flux-epilog-gate hold -t 1e309 $jobid x 2>big.err &&
	grep "timeout: .1e309. is infinite" big.err
'
test_expect_success 'hold --timeout 0 and -5m must be greater than 0' '
	test_expect_code 2 flux-epilog-gate hold -t 0 $jobid x 2>zero.err &&
	grep "timeout: .0. must be greater than 0" zero.err &&
	test_expect_code 2 flux-epilog-gate hold --timeout=-5m $jobid x 2>neg.err &&
	grep "timeout: .-5m. must be greater than 0" neg.err
'
test_expect_success 'hold --timeout soon is not a duration' '
	test_expect_code 2 flux-epilog-gate hold -t soon $jobid x 2>soon.err &&
	grep "timeout: .soon. is not a duration" soon.err &&
	flux-epilog-gate list --json $jobid | jq -e "length == 3"
'
test_expect_success 'list prints durations, the user name and a header' '
	flux-epilog-gate list $jobid >list.out &&
	test_debug "cat list.out" &&
	head -1 list.out |
		grep "^JOBID *DESCRIPTION *STATE *POINT *USER *AGE *ACTIVE *TIMEOUT$" &&
	grep "^$(flux job id --to=f58 $jobid) *bb *pending *epilog *$(id -un) .* 10m$" \
		list.out &&
	grep " stage-out *pending .* 1.5h$" list.out
'
test_expect_success 'list -n prints no header' '
	flux-epilog-gate list -n $jobid >noheader.out &&
	test $(wc -l <noheader.out) -eq 3 &&
	test_must_fail grep JOBID noheader.out
'
test_expect_success 'a 64-character description keeps the columns aligned' '
	flux-epilog-gate hold -q $jobid $long &&
	flux-epilog-gate list $jobid >wide.out &&
	test_debug "cat wide.out" &&
	awk "{ print index(\$0, \" pending\") }" wide.out | sed 1d | sort -u \
		>cols.out &&
	test $(wc -l <cols.out) -eq 1 &&
	test "$(head -1 wide.out | awk "{ print index(\$0, \" STATE\") }")" \
		= "$(cat cols.out)"
'
test_expect_success 'list -o takes a format with job ids in any form' '
	flux-epilog-gate list -n --description bb \
		-o "{id.dec} {id.words} {id.hex} {description} {timeout}" \
		$jobid >ids.out &&
	echo "$(flux job id $jobid) $(flux job id --to=words $jobid)" \
		"$(flux job id --to=hex $jobid) bb 600.0" >ids.exp &&
	test_cmp ids.exp ids.out
'
test_expect_success 'list -o long adds the user id and the hold times' '
	flux-epilog-gate list -o long $jobid >long.out &&
	head -1 long.out | grep "USER *UID *T_HOLD *T_START" &&
	grep " bb *pending *epilog *$(id -un) *$(id -u) " long.out
'
test_expect_success 'list -o help names the formats; an unknown one is a usage error' '
	flux-epilog-gate list -o help >help.out &&
	grep "^ *default" help.out &&
	grep "^ *long" help.out &&
	test_expect_code 2 flux-epilog-gate list -o nope 2>nope.err &&
	grep "No such format nope" nope.err &&
	test_expect_code 2 flux-epilog-gate list -o "{nope}" 2>field.err &&
	grep "Unknown format field: nope" field.err
'
test_expect_success 'a named format from the user config file' '
	mkdir -p config/flux &&
	cat >config/flux/flux-epilog-gate.toml <<-EOF &&
	[formats.names]
	description = "descriptions only"
	format = "{description}"
	EOF
	XDG_CONFIG_HOME=$(pwd)/config \
		flux-epilog-gate list -n -o names --description bb,fast $jobid \
		>named.out &&
	printf "bb\nfast\n" >named.exp &&
	test_cmp named.exp named.out
'
test_expect_success 'list --state, --user, --description filter' '
	running=$(running_job) &&
	flux-epilog-gate hold -q $running copy-back &&
	flux cancel $running &&
	wait_event $running epilog-start &&
	flux-epilog-gate list -n --state active -o "{description} {state}" \
		>active.out &&
	echo "copy-back active" >active.exp &&
	test_cmp active.exp active.out &&
	test $(flux-epilog-gate list -n --state pending | wc -l) -eq 4 &&
	test $(flux-epilog-gate list -n --user $(id -un) | wc -l) -eq 5 &&
	test $(flux-epilog-gate list -n --user $(id -u) | wc -l) -eq 5 &&
	flux-epilog-gate list -n --user 9999 >nobody.out &&
	test_must_be_empty nobody.out &&
	test $(flux-epilog-gate list -n --description bb,copy-back | wc -l) -eq 2
'
test_expect_success 'list --state with a bad state is a usage error' '
	test_expect_code 2 flux-epilog-gate list --state done 2>state.err &&
	grep "invalid state .done." state.err
'
test_expect_success 'list of an unknown job says so and exits 1' '
	unknown=$(flux job id --to=f58 123456789) &&
	test_expect_code 1 flux-epilog-gate list $unknown >unknown.out \
		2>unknown.err &&
	test_debug "cat unknown.err" &&
	grep "^flux-epilog-gate: unknown job" unknown.err
'
test_expect_success 'list of a job without holds prints only the header, exits 0' '
	bare=$(pending_job) &&
	flux-epilog-gate list $bare >bare.out &&
	test $(wc -l <bare.out) -eq 1 &&
	flux-epilog-gate list --json $bare | jq -e "length == 0"
'
test_expect_success 'list of several jobs lists each; one unknown makes it exit 1' '
	test_expect_code 1 flux-epilog-gate list -n -o "{description}" \
		$running $unknown $bare >several.out 2>several.err &&
	echo copy-back >several.exp &&
	test_cmp several.exp several.out &&
	grep "unknown job" several.err
'
test_expect_success 'list into a closed pipe ends quietly with status 0' '
	test "$(closed_pipe_status flux-epilog-gate list)" = 0 &&
	test_must_be_empty pipe.err
'
test_expect_success 'watch into a closed pipe ends quietly with status 0' '
	test "$(closed_pipe_status timeout 20 flux-epilog-gate watch)" = 0 &&
	test_must_be_empty pipe.err
'
test_expect_success 'watch --count 0 and -1 are usage errors, at once' '
	test_expect_code 2 timeout 20 flux-epilog-gate watch -c 0 2>c0.err &&
	grep "count of at least 1" c0.err &&
	test_expect_code 2 timeout 20 flux-epilog-gate watch --count=-1 2>c1.err &&
	grep "count of at least 1" c1.err
'
test_expect_success 'release of several jobs answers for each hold' '
	other=$(pending_job) &&
	flux-epilog-gate hold -q $other bb &&
	flux-epilog-gate release $jobid $other bb >many.out &&
	test_debug "cat many.out" &&
	printf "%s bb released\n" $(flux job id --to=f58 $jobid) \
		$(flux job id --to=f58 $other) >many.exp &&
	test_cmp many.exp many.out
'
test_expect_success 'release goes on past a refused hold and exits 1' '
	flux-epilog-gate hold -q $other fast &&
	test_expect_code 1 flux-epilog-gate release $unknown $other fast \
		>partial.out 2>partial.err &&
	test_debug "cat partial.err" &&
	grep "unknown job" partial.err &&
	grep "^$(flux job id --to=f58 $other) fast released$" partial.out
'
test_expect_success 'release of a hold already gone says so and exits 0' '
	flux-epilog-gate release $other fast 2>gone.err &&
	grep "fast: nothing to release" gone.err
'
test_expect_success 'release --all DESCRIPTION releases that hold of every job' '
	flux-epilog-gate hold -q $other fast &&
	flux-epilog-gate release -q --all fast >all.out &&
	test_must_be_empty all.out &&
	flux-epilog-gate list --json | jq -e "map(select(.description == \"fast\")) == []" &&
	flux-epilog-gate list --json $jobid | jq -e "length == 2"
'
test_expect_success 'release --all of a description no job holds exits 0' '
	flux-epilog-gate release --all nothing-here 2>none.err &&
	grep "no hold nothing-here to release" none.err
'
test_expect_success 'release --all with a JOBID, or without one, is a usage error' '
	test_expect_code 2 flux-epilog-gate release --all $jobid bb 2>mix.err &&
	grep "^usage: flux-epilog-gate release" mix.err &&
	test_expect_code 2 flux-epilog-gate release bb 2>one.err &&
	grep "JOBID... DESCRIPTION" one.err
'
test_expect_success 'release of a malformed job id is a usage error' '
	test_expect_code 2 flux-epilog-gate release $jobid "not!a-job" bb \
		2>badid.err &&
	grep "invalid job id" badid.err &&
	flux-epilog-gate list --json $jobid | jq -e "length == 2"
'
test_expect_success 'release --all of a bad description is refused, saying why' '
	test_expect_code 1 flux-epilog-gate release --all "bad desc" 2>bad.err &&
	grep "letters, digits" bad.err
'
test_expect_success 'help says what each command does' '
	flux-epilog-gate --help >top.help &&
	for cmd in path load hold release list watch; do
		grep "^ *$cmd " top.help || return 1
	done &&
	flux-epilog-gate release --help >release.help &&
	grep -- "--all DESCRIPTION" release.help &&
	flux-epilog-gate hold --help >hold.help &&
	grep -- "-t, --timeout=FSD" hold.help
'
test_expect_success 'cleanup: release every hold' '
	flux-epilog-gate release -q --all stage-out &&
	flux-epilog-gate release -q --all copy-back &&
	flux-epilog-gate release -q --all $long &&
	flux cancel $jobid $other $bare &&
	flux-epilog-gate list --json | jq -e "length == 0"
'

test_done
