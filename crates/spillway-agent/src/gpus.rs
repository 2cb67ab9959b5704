//! The node's virtual GPUs: which worker holds which index.

use spillway_api::WorkerRef;

/// Virtual GPU indices `0..n`, each free or held by one worker until that worker exits.
#[derive(Debug, Clone)]
pub struct GpuPool {
    owner: Vec<Option<WorkerRef>>,
}

impl GpuPool {
    /// A pool of `n` free GPUs.
    pub fn new(n: u32) -> Self {
        GpuPool { owner: vec![None; n as usize] }
    }

    /// How many GPUs no worker holds.
    pub fn free(&self) -> u32 {
        self.owner.iter().filter(|o| o.is_none()).count() as u32
    }

    /// Gives `n` free GPUs (the lowest free indices) to `worker` and returns their indices, or `None` (and gives
    /// nothing) when fewer than `n` are free.
    pub fn take(&mut self, n: u32, worker: WorkerRef) -> Option<Vec<u32>> {
        if self.free() < n {
            return None;
        }
        let mut picked = Vec::with_capacity(n as usize);
        for (i, slot) in self.owner.iter_mut().enumerate() {
            if picked.len() == n as usize {
                break;
            }
            if slot.is_none() {
                *slot = Some(worker);
                picked.push(i as u32);
            }
        }
        Some(picked)
    }

    /// Frees every GPU `worker` holds.
    pub fn release(&mut self, worker: WorkerRef) {
        for slot in self.owner.iter_mut() {
            if *slot == Some(worker) {
                *slot = None;
            }
        }
    }
}

/// The `CUDA_VISIBLE_DEVICES` value for these indices: `0,1,3`.
pub fn visible_devices(indices: &[u32]) -> String {
    indices.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(job: u32) -> WorkerRef {
        WorkerRef { job, attempt: 1, rank: 0 }
    }

    #[test]
    fn take_and_release() {
        let mut p = GpuPool::new(4);
        assert_eq!(p.take(2, w(1)), Some(vec![0, 1]));
        assert_eq!(p.take(3, w(2)), None, "only two left");
        assert_eq!(p.take(1, w(2)), Some(vec![2]));
        p.release(w(1));
        assert_eq!(p.free(), 3);
        assert_eq!(p.take(3, w(3)), Some(vec![0, 1, 3]));
        assert_eq!(visible_devices(&[0, 1, 3]), "0,1,3");
    }
}
