//! The harness of the real-process daemon tests: `spillway server` on a temp data dir with its own port.
#![allow(dead_code, clippy::disallowed_methods)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_spillway");

pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// A daemon under test: its data dir, port and process.
pub struct Daemon {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub port: u16,
    pub child: Option<Child>,
    pub agent: ureq::Agent,
    /// Extra arguments of `spillway server`.
    pub args: Vec<String>,
    /// Extra environment of `spillway server`.
    pub env: Vec<(String, String)>,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Daemon {
    pub fn new(name: &str, config: &str) -> Daemon {
        let mut d = Daemon::unstarted(name, config);
        d.start();
        d
    }

    /// A daemon with its data dir, port and config file, not started yet (the config may need the port).
    pub fn unstarted(name: &str, config: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("spillway-daemon-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("cluster.toml");
        std::fs::write(&cfg, config).unwrap();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Daemon {
            dir: dir.join("data"),
            config: cfg,
            port: free_port(),
            child: None,
            agent,
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.with_extension("log")).unwrap();
        let child = Command::new(BIN)
            .args(["server", "--config"])
            .arg(&self.config)
            .args(["--listen", &format!("127.0.0.1:{}", self.port), "--heartbeat-timeout-s", "5", "--data-dir"])
            .arg(&self.dir)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t = Instant::now();
        while self.raw("GET", "/healthz", None, None).0 != 200 {
            assert!(t.elapsed() < Duration::from_secs(20), "daemon did not come up; log: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default()
    }

    pub fn tokens(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("tokens.json")).unwrap()).unwrap()
    }

    pub fn admin(&self) -> String {
        self.tokens()["admin"].as_str().unwrap().to_string()
    }

    /// Returns (status, body) of a request.
    pub fn raw(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let auth = token.map(|t| format!("Bearer {t}"));
        let res = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = self.agent.post(&url).header("Content-Type", "application/json");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(body.unwrap_or("{}"))
            }
        };
        match res {
            Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    pub fn get(&self, path: &str) -> Value {
        let (s, b) = self.raw("GET", path, Some(&self.admin()), None);
        assert_eq!(s, 200, "GET {path}: {b}");
        serde_json::from_str(&b).unwrap()
    }

    pub fn post(&self, path: &str, body: Value) -> Value {
        let (s, b) = self.raw("POST", path, Some(&self.admin()), Some(&body.to_string()));
        assert!(s == 200 || s == 201, "POST {path}: {s} {b}");
        serde_json::from_str(&b).unwrap()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, 15) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Pids of agent processes of this daemon still alive.
    pub fn agents_alive(&self) -> Vec<u32> {
        let marker = self.dir.display().to_string();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
            if !zombie && cmd.contains(" agent ") && cmd.contains(&marker) {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        for pid in self.agents_alive() {
            unsafe { libc_kill(pid as i32, 9) };
        }
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    pub fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Returns whether python3 runs here. CI (`SPILLWAY_REQUIRE_SHARED=1`) installs it, so there its absence fails the
/// test instead of skipping it.
pub fn python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok && std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("SPILLWAY_REQUIRE_SHARED=1 but python3 is not installed (the job tests run examples/train.py)");
    }
    ok
}
