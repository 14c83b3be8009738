"""The fixed part of every generated sbatch script: run the group, decide, requeue.

It follows the per-group definitions that :mod:`workflows.backends.slurm.script`
writes (settings, ``exit_action``, ``write_launch_scripts``, ``stage_inputs``,
``upload_outputs``). Kept as one readable bash text so that the golden files and a
Slurm user see exactly what runs.
"""

BATCH_ENGINE = r"""# --- this run of the job (a requeue starts the script again with SLURM_RESTART_COUNT+1) ---
ALLOCATION="${SLURM_RESTART_COUNT:-0}"         # 0 on the first run, +1 per requeue
JOB_ROOT="$WORKDIR/$SLURM_JOB_ID"              # the same for every run of this job
RUN_DIR="$JOB_ROOT/allocation-$ALLOCATION"     # fresh per run: a new /tmp per task, like a new pod
ALLOCATIONS_LOG="$JOB_ROOT/allocations.log"    # one line per run: allocation, nodes, result, task, exit code, reason
mkdir -p "$RUN_DIR/tasks" "${SHARED_PATHS[@]}"
# The software the tasks run (PATH entries, the helper Python's environment) may live
# under /tmp too, e.g. a checkout with its virtualenv: keep it visible in private /tmps.
IFS=: read -ra PATH_ENTRIES <<<"$PATH"
RESCHED_SOURCE=$("$RESCHED_PYTHON" -c 'import os, wrapper; print(os.path.dirname(os.path.dirname(os.path.abspath(wrapper.__file__))))' 2>/dev/null || true)
for entry in "${PATH_ENTRIES[@]}" "$(dirname "$(dirname "$(command -v "$RESCHED_PYTHON")")")" "$RESCHED_SOURCE"; do
    case $entry in /tmp/?*) [ -d "$entry" ] && SHARED_PATHS+=("$entry") ;; esac
done
say() { echo "resched[$SLURM_JOB_ID/$ALLOCATION] $(date -u +%H:%M:%S.%3N): $*"; }
record() { # result task exit-code reason
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$ALLOCATION" "$SLURM_JOB_NODELIST" "$1" "$2" "$3" "$4" >>"$ALLOCATIONS_LOG"
}
helper() { "$RESCHED_PYTHON" -m workflows.backends.slurm.jobside "$@"; }
say "group $GROUP of workflow $WORKFLOW on $SLURM_JOB_NODELIST (run $((ALLOCATION + 1)))"

# --- nodes: task i runs on node i / TASKS_PER_NODE; {{host:T}} becomes that node's address ---
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
node_address() { scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p'; }
declare -A NODE_OF
for i in "${!TASKS[@]}"; do
    NODE_OF[${TASKS[$i]}]=${NODES[$((i / TASKS_PER_NODE))]}
    export "RESCHED_HOST_${TASK_VARS[$i]}=$(node_address "${NODES[$((i / TASKS_PER_NODE))]}")"
done

# --- private /tmp: each task sees its own directory as /tmp, even when tasks share a node ---
# The shared paths that live under /tmp (WORKDIR, file:// stores) are bound back in.
cat >"$RUN_DIR/private-tmp.sh" <<'RESCHED_EOF'
#!/usr/bin/env bash
# usage: private-tmp.sh TASK_TMP SHARED_PATH... -- COMMAND...   (a mount namespace per task)
set -euo pipefail
if [ -z "${RESCHED_PRIVATE_TMP:-}" ]; then
    export RESCHED_PRIVATE_TMP=1
    if [ "$(id -u)" = 0 ]; then exec unshare --mount --propagation private -- bash "$0" "$@"; fi
    exec unshare --user --map-root-user --mount --propagation private -- bash "$0" "$@"
fi
task_tmp=$1
shift
while [ "$1" != "--" ]; do
    case $1 in /tmp/*)
        mkdir -p "$task_tmp/${1#/tmp/}"
        mount --bind "$1" "$task_tmp/${1#/tmp/}" ;;
    esac
    shift
done
shift
mount --rbind "$task_tmp" /tmp
exec "$@"
RESCHED_EOF

# --- prepare every task: its files: (tokens substituted) and its inputs, staged at start ---
prepare_task() { # task: $RUN_DIR/tasks/<task>/{launch.sh, tmp/, input/N/, output/}
    local dir="$RUN_DIR/tasks/$1"
    mkdir -p "$dir/tmp" "$dir/input" "$dir/output"
    if [ -d "$BUNDLE/files/$1" ]; then
        RESCHED_TASK_DIR="$dir" RESCHED_TASK_UUID="$SLURM_JOB_ID-$1" helper materialize "$BUNDLE/files/$1" "$dir" || return 1
    fi
    if [ -d "$BUNDLE/verbatim/$1" ]; then # base64 files: written as they are, no tokens
        helper materialize "$BUNDLE/verbatim/$1" "$dir" --verbatim || return 1
    fi
}
stage_input() { # task index url [regex]: OSMO downloads inputs whenever a task (re)starts
    helper stage "$3" "$RUN_DIR/tasks/$1/input/$2" "${@:4}"
}
stage_task_input() { # task index published-outputs-dir [regex]: a task: input (upstream job)
    helper stage-dir "$3" "$RUN_DIR/tasks/$1/input/$2" "${@:4}"
}
write_launch_scripts
for task in "${TASKS[@]}"; do
    if ! prepare_task "$task"; then
        record FAIL "$task" - "could not prepare the task's files"
        say "FAILED: could not prepare the files of task $task"
        exit 1
    fi
done
stage_inputs || { record FAIL - - "could not stage the inputs"; say "FAILED: could not stage the inputs"; exit 1; }

# --- start the tasks: one job step each, the lead first ---------------------------------
declare -A TASK_OF_PID
start_task() { # task
    local task=$1 dir="$RUN_DIR/tasks/$1" node=${NODE_OF[$1]}
    RESCHED_TASK_DIR="$dir" RESCHED_NODE="$node" RESCHED_TASK_UUID="$SLURM_JOB_ID-$task" \
        RESCHED_STOP_SIGNAL="$STOP_SIGNAL" RESCHED_STOP_BROADCAST=1 \
        srun --nodes=1 --ntasks=1 --overlap --nodelist="$node" --job-name="$task" \
        --kill-on-bad-exit=0 --output="$dir/task.log" \
        bash "$RUN_DIR/private-tmp.sh" "$dir/tmp" "${SHARED_PATHS[@]}" -- bash "$dir/launch.sh" &
    TASK_OF_PID[$!]=$task
    say "task $task started on $node (log: $dir/task.log)"
    start_checkpoint_timers "$task" "$!" # they end with their final upload (stop_tasks waits)
}
for task in "${TASKS[@]}"; do start_task "$task"; done

# --- grace signal: Slurm sends it before the time limit (tests: scancel --batch --signal) ---
# Forwarded to every task: the wrapper checkpoints and stops; the job then requeues for free.
GRACE_RECEIVED=0
# Slurm delivers a step's signal to EVERY process of the step, the training too, so the
# tasks get the stop signal they save on (STOP_SIGNAL), not the grace signal: a training
# that only handles SIGTERM would die unsaved on USR1. The wrappers know the training got
# it already (RESCHED_STOP_BROADCAST) and do not send it twice.
forward_grace() {
    GRACE_RECEIVED=1
    say "got SIG$GRACE_SIGNAL: asking every task to checkpoint and stop (SIG$STOP_SIGNAL)"
    local pid step
    for pid in "${!TASK_OF_PID[@]}"; do
        step=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' | awk -v t="${TASK_OF_PID[$pid]}" '$2 == t {print $1}')
        if [ -n "$step" ]; then scancel --signal="$STOP_SIGNAL" "$step" 2>/dev/null
        else kill -s "$GRACE_SIGNAL" "$pid" 2>/dev/null; fi
    done
}
trap forward_grace "$GRACE_SIGNAL"

# --- wait: the group's result, decided as OSMO decides it (group_reaction above) ----------
#   end      -> the group takes this task's result; the other tasks stop
#   requeue  -> the whole group requeues (Slurm cannot move one step alone)
#   wait     -> keep waiting (a non-lead completed, or failed with ignoreNonleadStatus)
RESULT="" RESULT_TASK="" RESULT_CODE=""
while [ -z "$RESULT" ] && [ "${#TASK_OF_PID[@]}" -gt 0 ]; do
    running=" $(jobs -rp | tr '\n' ' ') " # (polling instead of `wait -n -p`: bash >= 4 is enough)
    for pid in "${!TASK_OF_PID[@]}"; do
        [[ $running == *" $pid "* ]] && continue
        wait "$pid"
        code=$?
        task=${TASK_OF_PID[$pid]}
        unset "TASK_OF_PID[$pid]"
        action=$(exit_action "$task" "$code")
        role=nonlead
        [ "$task" = "$LEAD" ] && role=lead
        reaction=$(group_reaction "$role" "$action")
        say "task $task exited $code -> $action ($reaction)"
        if [ "$reaction" != wait ]; then
            RESULT=$action RESULT_TASK=$task RESULT_CODE=$code
            break
        fi
    done
    if [ -z "$RESULT" ]; then
        sleep 0.5 &
        wait $! # a short nap that the grace signal interrupts
    fi
done

# --- the rest of the group takes the result: stop what still runs -------------------------
# SIGTERM to each step's tasks (so a wrapper can publish a last checkpoint), SIGKILL to
# what is left after STOP_TIMEOUT_S. (SIGTERM to srun itself would kill the step at once.)
stop_tasks() {
    local pid task step waited=0
    for pid in "${!TASK_OF_PID[@]}"; do
        task=${TASK_OF_PID[$pid]}
        step=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' | awk -v t="$task" '$2 == t {print $1}')
        if [ -n "$step" ]; then scancel --signal=TERM "$step" 2>/dev/null; else kill -TERM "$pid" 2>/dev/null; fi
        say "stopping task $task (the group's result is decided)"
    done
    while [ -n "$(jobs -rp)" ] && ((waited < STOP_TIMEOUT_S * 10)); do sleep 0.1; waited=$((waited + 1)); done
    for pid in $(jobs -rp); do kill -KILL "$pid" 2>/dev/null; done
    wait
}
stop_tasks

# --- node exclusion: Slurm accepts ExcNodeList only while the job is pending, i.e. right
#     after `scontrol requeue` (the job cannot start again before this script has ended) ---
exclude_node() { # node[,node...]
    local current wanted total
    current=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/.*ExcNodeList=\([^ ]*\).*/\1/p')
    [ "$current" = "(null)" ] && current=""
    wanted=$(scontrol show hostnames "${current:+$current,}$1" | sort -u | paste -sd, -)
    total=$(sinfo -h -N -p "${SLURM_JOB_PARTITION:-}" -o %N | sort -u | wc -l)
    if ((total - $(tr ',' '\n' <<<"$wanted" | wc -l) < SLURM_JOB_NUM_NODES)); then
        say "NOT excluding node $1: the partition would have too few nodes left for this job"
        return 0
    fi
    scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$wanted" &&
        say "node $1 added to the job's excluded nodes (ExcNodeList=$wanted)"
}
requeue_job() { # [node to exclude]
    trap '' TERM "$GRACE_SIGNAL" # the requeue signals this script: finish the bookkeeping first
    scontrol requeue "$SLURM_JOB_ID" || { say "FAILED: scontrol requeue was refused"; exit 1; }
    if [ -n "${1:-}" ]; then exclude_node "$1"; fi
    exit 0
}

# --- act on the result ---------------------------------------------------------------------
OUTCOME="$RUN_DIR/tasks/$RESULT_TASK/outcome.json" # the wrapper's final record, if it wrote one
if [ -f "$OUTCOME" ]; then
    say "$RESULT_TASK's wrapper: $(helper describe "$OUTCOME")"
fi
# A downstream job (sbatch --dependency=afterok on this one) stages its task: inputs from
# $JOB_ROOT/outputs/<task>: each task's {{output}} folder, published when the group completed.
publish_task_outputs() {
    local task
    for task in "${TASKS[@]}"; do
        mkdir -p "$JOB_ROOT/outputs/$task" && cp -a "$RUN_DIR/tasks/$task/output/." "$JOB_ROOT/outputs/$task/" || return 1
    done
}
if [ "$RESULT" = COMPLETE ]; then
    upload_outputs || { record FAIL - 0 "could not upload the outputs"; exit 1; }
    publish_task_outputs || { record FAIL - 0 "could not publish the task outputs"; exit 1; }
    record COMPLETE "$RESULT_TASK" "$RESULT_CODE" "lead completed"
    say "COMPLETED: task $RESULT_TASK exited $RESULT_CODE"
    exit 0
fi
if [ "$GRACE_RECEIVED" = 1 ]; then # a stop we asked for: no failure budget is spent
    record PREEMPT "$RESULT_TASK" "$RESULT_CODE" "grace signal SIG$GRACE_SIGNAL: checkpointed and stopped"
    say "REQUEUED after SIG$GRACE_SIGNAL (free: the failure budget is not spent)"
    requeue_job
fi
if [ "$RESULT" = RESCHEDULE ]; then
    SPENT=$(grep -c $'\tRESCHEDULE\t' "$ALLOCATIONS_LOG" 2>/dev/null || true) # failure requeues so far
    SPENT=${SPENT:-0}
    if ((SPENT < MAX_RETRY_PER_TASK)); then
        EXCLUDE=""
        if [ -f "$OUTCOME" ]; then # the wrapper's node if marked, NVRx straggler nodes
            EXCLUDE=$(helper exclusions "$OUTCOME")
        fi
        record RESCHEDULE "$RESULT_TASK" "$RESULT_CODE" "exitActions RESCHEDULE ($((SPENT + 1))/$MAX_RETRY_PER_TASK)"
        say "REQUEUED: task $RESULT_TASK exited $RESULT_CODE (RESCHEDULE $((SPENT + 1))/$MAX_RETRY_PER_TASK)"
        requeue_job "$EXCLUDE"
    fi
    REASON="task $RESULT_TASK exited $RESULT_CODE (RESCHEDULE) but the reschedule budget is spent ($SPENT/$MAX_RETRY_PER_TASK)"
else
    REASON="task $RESULT_TASK exited $RESULT_CODE (exitActions: FAIL, or no match for a non-zero code)"
fi
record FAIL "$RESULT_TASK" "$RESULT_CODE" "$REASON"
say "FAILED: $REASON"
exit $((RESULT_CODE == 0 ? 1 : RESULT_CODE))
"""
