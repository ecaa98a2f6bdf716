# Detached chains on the GPU machine, sourced by factorio_repro.sh with $repro set. A chain runs
# under setsid, so it outlives the device call that started it, and is found again by its pid
# file: a pgrep on the driver's command line also matched the device call itself, whose text
# names the driver when CHAIN is set, so the launcher started nothing and waited 551 s on it
# (session 31).

# chain GPU NAME COMMAND: run COMMAND under bash -c on GPU, detached; $repro/NAME.log, $repro/NAME.pid
chain() {
    CUDA_VISIBLE_DEVICES=$1 setsid nohup bash -c "$3" > "$repro/$2.log" 2>&1 < /dev/null &
    echo $! > "$repro/$2.pid"
}

# running: whether a chain whose pid file is in $repro still lives
running() { for p in "$repro"/*.pid; do [ -f "$p" ] && kill -0 "$(cat "$p")" 2> /dev/null && return 0; done; return 1; }
