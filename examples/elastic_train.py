#!/usr/bin/env python3
"""Data-parallel training with PyTorch under torchrun (elastic) and the Spillway job contract, on CPU with gloo.

Fits y = w.x + b on synthetic data. Every step's global batch depends only on the step number; each of the
WORLD_SIZE ranks takes its slice, the summed gradients are all-reduced and divided by the global batch size, so
the model after N steps is the same (up to float rounding) whatever width each step ran at. That is what lets an
elastic job shrink and grow and still end where a rigid one would.

Rank 0 checkpoints (step, w, b) to $SPILLWAY_CHECKPOINT_DIR/ckpt.pt every --checkpoint-every steps, and at the
end of a step once SIGTERM came; on start, rank 0 loads it and broadcasts it, so all ranks resume from the same
step. Lines printed by rank 0: `starting at step 0 (world W, attempt A)`, `resumed from step S (world W, attempt
A)`, `step S world W attempt A loss L`, `checkpoint at step S (attempt A)`, `done: step N w [...] b B`.

    torchrun --nnodes=1:2 --rdzv-backend=c10d ... elastic_train.py --steps 200   # under Spillway
    elastic_train.py --steps 200 --single                                        # one process, no torch.distributed
"""
import argparse, os, signal, sys, time

import torch
import torch.distributed as dist

DIM, BATCH, LR = 8, 64, 0.05
ATTEMPT = os.environ.get("SPILLWAY_ATTEMPT", "1")


def log(msg):
    print(msg, flush=True)


def batch(step, true_w):
    """The global batch of `step`: the same on every attempt and at every width."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, DIM, generator=g, dtype=torch.float64)
    y = x @ true_w + 0.5 + 0.1 * torch.randn(BATCH, generator=g, dtype=torch.float64)
    return x, y


def load(path):
    if not os.path.exists(path):
        return 0, torch.zeros(DIM, dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    c = torch.load(path)
    return int(c["step"]), c["w"], c["b"]


def save(path, step, w, b):
    tmp = path + ".tmp"
    torch.save({"step": step, "w": w, "b": b}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a reader sees the old checkpoint or the new one, never half of one
    log(f"checkpoint at step {step} (attempt {ATTEMPT})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--single", action="store_true", help="one process without torch.distributed (a reference)")
    args = p.parse_args()
    dist_on = not args.single
    if dist_on:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist_on else (0, 1)
    ckpt_dir = os.environ.get("SPILLWAY_CHECKPOINT_DIR", "./checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "ckpt.pt")
    true_w = torch.linspace(-2, 2, DIM, dtype=torch.float64)

    # Rank 0 reads the checkpoint; everyone resumes from what it read.
    step, w, b = load(path) if rank == 0 else (0, torch.zeros(DIM, dtype=torch.float64), torch.zeros((), dtype=torch.float64))
    state = torch.cat([torch.tensor([float(step)], dtype=torch.float64), w, b.reshape(1)])
    if dist_on:
        dist.broadcast(state, src=0)
    step, w, b = int(state[0].item()), state[1 : 1 + DIM].clone(), state[1 + DIM].clone()
    if rank == 0:
        log(f"{'resumed from' if step else 'starting at'} step {step} (world {world}, attempt {ATTEMPT})")

    # SIGTERM only raises a flag: the step in flight finishes (its all-reduce needs every rank), then rank 0 saves.
    term = []
    signal.signal(signal.SIGTERM, lambda _sig, _frame: term.append(True))
    while step < args.steps:
        t0 = time.monotonic()
        x, y = batch(step, true_w)
        lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
        err = x[lo:hi] @ w + b - y[lo:hi]
        grad = torch.cat([2 * x[lo:hi].T @ err, (2 * err.sum()).reshape(1), (err * err).sum().reshape(1)])
        if dist_on:
            dist.all_reduce(grad)
        grad /= BATCH
        w, b, step = w - LR * grad[:DIM], b - LR * grad[DIM], step + 1
        if rank == 0:
            log(f"step {step} world {world} attempt {ATTEMPT} loss {grad[DIM + 1].item():.6f}")
            if step % args.checkpoint_every == 0 or step == args.steps or term:
                save(path, step, w, b)
        if term:
            sys.exit(143)
        time.sleep(max(0.0, args.step_time - (time.monotonic() - t0)))
    if rank == 0:
        log(f"done: step {step} w {[round(v, 9) for v in w.tolist()]} b {round(b.item(), 9)}")
    if dist_on:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
