//! The user-data an instance boots with: a shell script that starts `spillway agent` for its node, with the node
//! token on the agent's stdin (never on its command line or in its environment, which its jobs can read), or for
//! a node Slurm asked for, `slurmd` under the node's Slurm name.

/// What the agent on an instance needs to know.
pub struct AgentBoot<'a> {
    pub agent_path: &'a str,
    pub server_url: &'a str,
    pub node: u32,
    pub gpus: u32,
    pub token: &'a str,
    pub data_dir: &'a str,
    pub run_as: Option<&'a str>,
    pub imds_url: &'a str,
}

/// Returns the user-data script (plain text; EC2 wants it base64-encoded, see [`base64`]).
pub fn script(b: &AgentBoot<'_>) -> String {
    let mut args = vec![
        quote(b.agent_path),
        "agent".to_string(),
        "--server".into(),
        quote(b.server_url),
        "--node".into(),
        b.node.to_string(),
        "--gpus".into(),
        b.gpus.to_string(),
        "--data-dir".into(),
        quote(b.data_dir),
        "--imds-url".into(),
        quote(b.imds_url),
        "--token-stdin".into(),
    ];
    if let Some(user) = b.run_as {
        args.push("--run-as".into());
        args.push(quote(user));
    }
    format!(
        "#!/bin/sh\n# spillway node {}: starts its agent (the token goes to the agent's stdin only)\nmkdir -p {}\nprintf '%s\\n' {} | exec {}\n",
        b.node,
        quote(b.data_dir),
        quote(b.token),
        args.join(" ")
    )
}

/// Returns the user-data of a node Slurm asked for: it boots `slurmd` as Slurm node `name`, with `args` (say
/// `--conf-server ctl:6817` for configless Slurm); no Spillway token goes to it, and nothing of Spillway runs.
pub fn slurm_script(node: u32, name: &str, slurmd: &str, args: &[String]) -> String {
    let extra: Vec<String> = args.iter().map(|a| quote(a)).collect();
    format!(
        "#!/bin/sh\n# spillway node {node}: Slurm node {name}\nexec {} -N {} {}\n",
        quote(slurmd),
        quote(name),
        extra.join(" ")
    )
}

/// Quotes `s` for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Standard base64 with padding (what EC2 expects for user-data).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_vectors() {
        let cases =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn a_slurm_node_boots_slurmd_under_its_name_with_no_token() {
        let s = slurm_script(3, "gpu-07", "/usr/sbin/slurmd", &["--conf-server".into(), "ctl:6817".into()]);
        assert_eq!(
            s,
            "#!/bin/sh\n# spillway node 3: Slurm node gpu-07\nexec '/usr/sbin/slurmd' -N 'gpu-07' '--conf-server' 'ctl:6817'\n"
        );
    }

    #[test]
    fn the_script_passes_the_token_on_stdin_and_quotes_everything() {
        let s = script(&AgentBoot {
            agent_path: "/opt/spill way/spillway",
            server_url: "http://10.0.0.1:7878",
            node: 7,
            gpus: 8,
            token: "tok'en",
            data_dir: "/var/lib/a",
            run_as: Some("train"),
            imds_url: "http://169.254.169.254",
        });
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("printf '%s\\n' 'tok'\\''en' | exec '/opt/spill way/spillway' agent"), "{s}");
        assert!(s.contains("--node 7 --gpus 8") && s.contains("--token-stdin --run-as 'train'"), "{s}");
        // The token is nowhere on the agent's own command line.
        let exec_line = s.lines().find(|l| l.contains("exec")).unwrap();
        let command = exec_line.split(" | exec ").nth(1).unwrap();
        assert!(!command.contains("tok'") && !command.contains("en'"), "{command}");
    }
}
