#!/usr/bin/env python3
"""A small real training loop under the Spillway job contract (standard library only).

Fits y = w.x + b on seeded synthetic data with mini-batch SGD. Rank 0 checkpoints (step, w, b, RNG state) to
$SPILLWAY_CHECKPOINT_DIR/ckpt.json every --checkpoint-every steps, and on SIGTERM at the end of the current step
(then exits 143); a new attempt resumes from the checkpoint. Other ranks only read it.
"""
import argparse, json, os, random, signal, sys, time

DIM, BATCH, LR = 4, 16, 0.05


def log(msg):
    print(msg, flush=True)


def make_data(n=512):
    rng = random.Random(1234)  # the data set is the same on every attempt
    true_w = [rng.uniform(-2, 2) for _ in range(DIM)]
    xs = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(n)]
    ys = [sum(a * b for a, b in zip(true_w, x)) + 0.5 + rng.gauss(0, 0.1) for x in xs]
    return xs, ys


def to_json_state(state):  # random.getstate() is nested tuples; JSON wants lists
    return [state[0], list(state[1]), state[2]]


def from_json_state(s):
    return (s[0], tuple(s[1]), s[2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=5)
    args = p.parse_args()
    ckpt_dir = os.environ.get("SPILLWAY_CHECKPOINT_DIR", "./checkpoints")
    ckpt_path = os.path.join(ckpt_dir, "ckpt.json")
    attempt = os.environ.get("SPILLWAY_ATTEMPT", "1")
    rank0 = int(os.environ.get("RANK", "0")) == 0
    xs, ys = make_data()
    rng, w, b, step = random.Random(42), [0.0] * DIM, 0.0, 0
    if os.path.exists(ckpt_path):
        with open(ckpt_path) as f:
            c = json.load(f)
        step, w, b = c["step"], c["w"], c["b"]
        rng.setstate(from_json_state(c["rng"]))
        log(f"resumed from step {step} (attempt {attempt})")
    else:
        log(f"starting at step 0 (attempt {attempt})")

    def save():
        if not rank0:
            return
        os.makedirs(ckpt_dir, exist_ok=True)
        tmp = ckpt_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "w": w, "b": b, "rng": to_json_state(rng.getstate())}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt_path)  # atomic: a reader sees the old or the new checkpoint, never half of one

    # The handler only raises a flag: checkpointing from inside it could save a half-applied update.
    term = []
    signal.signal(signal.SIGTERM, lambda _sig, _frame: term.append(True))
    while step < args.steps:
        idx = [rng.randrange(len(xs)) for _ in range(BATCH)]
        gw, gb, loss = [0.0] * DIM, 0.0, 0.0
        for i in idx:
            err = sum(a * c for a, c in zip(w, xs[i])) + b - ys[i]
            loss += err * err / BATCH
            gw = [g + 2 * err * x / BATCH for g, x in zip(gw, xs[i])]
            gb += 2 * err / BATCH
        w = [a - LR * g for a, g in zip(w, gw)]
        b -= LR * gb
        step += 1
        log(f"step {step} loss {loss:.6f}")
        if step % args.checkpoint_every == 0:
            save()
        end = time.monotonic() + args.step_time
        while not term and time.monotonic() < end:
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        if term:
            save()
            log(f"SIGTERM: checkpointed at step {step}, exiting")
            sys.exit(143)
    save()
    loss = sum((sum(a * c for a, c in zip(w, x)) + b - y) ** 2 for x, y in zip(xs, ys)) / len(xs)
    log(f"done: {step} steps, final loss {loss:.6f}")


if __name__ == "__main__":
    main()
