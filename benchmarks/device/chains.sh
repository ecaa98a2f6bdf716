# Detached runs on the GPU machine, sourced by every launcher in benchmarks/device. A run goes
# under setsid, so it outlives the device call that started it, and is found again by its pid
# file: a pgrep on the driver's command line also matched the device call itself, whose text
# names the driver when CHAIN is set, so the launcher started nothing and waited 551 s on it
# (session 31).

# chain DIR NAME COMMAND: run COMMAND under bash -c, detached, on the GPUs of CUDA_VISIBLE_DEVICES
# as the caller sets it; its output in DIR/NAME.log, its pid in DIR/NAME.pid
chain() {
    setsid nohup bash -c "$3" > "$1/$2.log" 2>&1 < /dev/null &
    echo $! > "$1/$2.pid"
}

# alive PIDFILE...: whether the run of one of these pid files still lives (missing files: no run)
alive() { local p; for p in "$@"; do [ -f "$p" ] && kill -0 "$(cat "$p")" 2> /dev/null && return 0; done; return 1; }
