//! GPU utilization from NVML, loaded at run time with `dlopen` so the agent runs (reporting nothing) on machines
//! without NVIDIA's driver.

use std::ffi::{CStr, c_void};
use std::os::raw::{c_int, c_uint};
use std::time::{Duration, Instant};

type NvmlReturn = c_int;
type NvmlDevice = *mut c_void;
const NVML_SUCCESS: NvmlReturn = 0;

#[repr(C)]
#[derive(Default)]
struct NvmlUtilization {
    gpu: c_uint,
    memory: c_uint,
}

type InitFn = unsafe extern "C" fn() -> NvmlReturn;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
type HandleFn = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn;
type UtilFn = unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> NvmlReturn;

/// An initialised NVML library.
pub struct Nvml {
    count: CountFn,
    handle: HandleFn,
    util: UtilFn,
}

/// Looks up `name` in the library `lib`; `None` when it is missing.
unsafe fn symbol(lib: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: lib is a live handle from dlopen and name is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Nvml {
    /// Loads and initialises `libnvidia-ml.so.1`. Returns `None` when it is absent, lacks a function we use, or
    /// fails to initialise (no driver, no GPU): the agent then reports no utilization.
    pub fn open() -> Option<Nvml> {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the signature NVML documents.
        // The handle is never closed: the function pointers must stay valid for the life of the process.
        unsafe {
            let lib = libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if lib.is_null() {
                return None;
            }
            let init: InitFn = std::mem::transmute(symbol(lib, c"nvmlInit_v2")?);
            let count: CountFn = std::mem::transmute(symbol(lib, c"nvmlDeviceGetCount_v2")?);
            let handle: HandleFn = std::mem::transmute(symbol(lib, c"nvmlDeviceGetHandleByIndex_v2")?);
            let util: UtilFn = std::mem::transmute(symbol(lib, c"nvmlDeviceGetUtilizationRates")?);
            if init() != NVML_SUCCESS {
                return None;
            }
            Some(Nvml { count, handle, util })
        }
    }

    /// The average GPU utilization (0..1) of the first `gpus` devices (fewer if the machine has fewer). `None` when
    /// no device could be read.
    pub fn utilization(&self, gpus: u32) -> Option<f64> {
        let mut count: c_uint = 0;
        // SAFETY: the out-pointers are valid locals; the functions come from an initialised NVML.
        unsafe {
            if (self.count)(&mut count) != NVML_SUCCESS {
                return None;
            }
            let mut sum = 0.0;
            let mut read = 0u32;
            for i in 0..count.min(gpus) {
                let mut dev: NvmlDevice = std::ptr::null_mut();
                if (self.handle)(i, &mut dev) != NVML_SUCCESS {
                    continue;
                }
                let mut u = NvmlUtilization::default();
                if (self.util)(dev, &mut u) == NVML_SUCCESS {
                    sum += f64::from(u.gpu.min(100)) / 100.0;
                    read += 1;
                }
            }
            (read > 0).then(|| sum / f64::from(read))
        }
    }
}

/// Utilization sampled at most once per period (NVML itself averages over its own sample window), cached between.
pub struct UtilizationSampler {
    nvml: Option<Nvml>,
    gpus: u32,
    period: Duration,
    last: Option<(Instant, Option<f64>)>,
}

impl UtilizationSampler {
    /// A sampler for the node's first `gpus` devices, every 5 s; NVML is looked for once, here.
    pub fn new(gpus: u32) -> Self {
        UtilizationSampler { nvml: Nvml::open(), gpus, period: Duration::from_secs(5), last: None }
    }

    /// The latest sample, taken anew when the last one is older than the period; `None` without NVML.
    pub fn get(&mut self) -> Option<f64> {
        let nvml = self.nvml.as_ref()?;
        let now = Instant::now();
        match self.last {
            Some((at, value)) if now.duration_since(at) < self.period => value,
            _ => {
                let value = nvml.utilization(self.gpus);
                self.last = Some((now, value));
                value
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_or_in_range() {
        // On a machine without NVIDIA's driver this is None; with one it is a fraction. Never a panic.
        let mut s = UtilizationSampler::new(1);
        if let Some(u) = s.get() {
            assert!((0.0..=1.0).contains(&u), "utilization {u}");
        }
        println!("nvml present: {}, utilization {:?}", s.nvml.is_some(), s.get());
    }
}
