//! The `[provider]` table of a cluster config with `kind = "aws"`: where to launch (region, launch template,
//! subnets), how agents reach the daemon, and where interruption events arrive.

use serde::Deserialize;

/// AWS settings, as written under `[provider]` in the cluster config.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AwsOptions {
    /// Always "aws" here (the table is shared with other providers).
    pub kind: String,
    /// AWS region; absent: the SDK's default chain (`AWS_REGION`, the profile).
    pub region: Option<String>,
    /// Another EC2/SQS endpoint (a VPC endpoint, or an EC2-compatible server in tests).
    pub endpoint_url: Option<String>,
    /// Name of the launch template every node starts from (AMI, security groups, instance profile, key).
    pub launch_template: String,
    /// Version of that template; default `$Default`.
    #[serde(default = "default_version")]
    pub launch_template_version: String,
    /// AMI to use instead of the template's (it must have `spillway` installed at `agent_path`).
    pub image_id: Option<String>,
    /// Subnets (one per zone) a fleet may choose from; empty: the template's network settings.
    #[serde(default)]
    pub subnets: Vec<String>,
    /// URL of the SQS queue EventBridge feeds with EC2 interruption, rebalance and state-change events.
    pub interruption_queue_url: Option<String>,
    /// The daemon's API as the instances reach it (the user-data passes it to the agent).
    pub server_url: String,
    /// Where `spillway` is installed on the AMI.
    #[serde(default = "default_agent_path")]
    pub agent_path: String,
    /// The agent's data directory on the instance.
    #[serde(default = "default_agent_data_dir")]
    pub agent_data_dir: String,
    /// Run jobs on the instances as this Unix user (the agent runs as root).
    pub agent_run_as: Option<String>,
    /// The agent polls the instance metadata service here for spot notices (IMDSv2).
    #[serde(default = "default_imds_url")]
    pub imds_url: String,
    /// For nodes Slurm asks for: the image's `slurmd`, and its arguments besides `-N <name>` (such as
    /// `["--conf-server", "ctl:6817"]` for configless Slurm).
    #[serde(default = "default_slurmd")]
    pub slurmd: String,
    #[serde(default)]
    pub slurmd_args: Vec<String>,
}

fn default_slurmd() -> String {
    "/usr/sbin/slurmd".into()
}

fn default_version() -> String {
    "$Default".into()
}
fn default_agent_path() -> String {
    "/usr/local/bin/spillway".into()
}
fn default_agent_data_dir() -> String {
    "/var/lib/spillway-agent".into()
}
fn default_imds_url() -> String {
    "http://169.254.169.254".into()
}

/// The config file as the AWS provider reads it: its `[provider]` table (the rest is the engine's).
#[derive(Deserialize)]
struct File {
    provider: AwsOptions,
}

/// Longest value of the settings that go into every instance's user-data or tags.
const MAX_SETTING: usize = 1024;

impl AwsOptions {
    /// Reads the `[provider]` table of config `file` (its text); errors name the file, the line and the key.
    pub fn from_config(file: &str, text: &str) -> Result<AwsOptions, String> {
        let opts = toml::from_str::<File>(text).map_err(|e| format!("{file}: [provider]: {e}"))?.provider;
        let bad = |key: &str, why: String| Err(format!("{file}: [provider] {key}: {why}"));
        if opts.kind != "aws" {
            return bad("kind", format!("{:?} is not \"aws\"", opts.kind));
        }
        if opts.launch_template.trim().is_empty() {
            return bad("launch_template", "is empty".into());
        }
        let host = opts.server_url.strip_prefix("http://").or_else(|| opts.server_url.strip_prefix("https://"));
        if host.is_none_or(|h| h.trim_matches('/').is_empty()) {
            return bad(
                "server_url",
                format!("{:?} must be http://HOST[:PORT] or https://HOST[:PORT]", opts.server_url),
            );
        }
        for (i, s) in opts.subnets.iter().enumerate() {
            if let Some(j) = opts.subnets[..i].iter().position(|x| x == s) {
                return bad("subnets", format!("{s:?} is listed twice (entries {} and {})", j + 1, i + 1));
            }
        }
        for (key, value) in [("agent_path", &opts.agent_path), ("agent_data_dir", &opts.agent_data_dir)] {
            if !value.starts_with('/') {
                return bad(key, format!("{value:?} must be an absolute path"));
            }
        }
        let long = [
            ("server_url", Some(&opts.server_url)),
            ("agent_path", Some(&opts.agent_path)),
            ("agent_data_dir", Some(&opts.agent_data_dir)),
            ("agent_run_as", opts.agent_run_as.as_ref()),
            ("imds_url", Some(&opts.imds_url)),
        ];
        for (key, value) in long {
            if value.is_some_and(|v| v.len() > MAX_SETTING) {
                return bad(key, format!("is longer than {MAX_SETTING} bytes"));
            }
        }
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AwsOptions, String> {
        AwsOptions::from_config("c.toml", &format!("[cluster]\nname = \"x\"\n\n[provider]\n{text}"))
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let o = parse("kind = \"aws\"\nlaunch_template = \"gpu\"\nserver_url = \"http://10.0.0.1:7878\"").unwrap();
        assert_eq!(o.launch_template_version, "$Default");
        assert_eq!(o.agent_path, "/usr/local/bin/spillway");
        assert!(o.subnets.is_empty() && o.interruption_queue_url.is_none());
    }

    #[test]
    fn a_bad_table_is_refused_naming_the_key() {
        let e = parse("kind = \"aws\"\nlaunch_template = \"gpu\"\nserver_url = \"http://x\"\nsubnet = [\"a\"]")
            .unwrap_err();
        assert!(e.contains("c.toml") && e.contains("subnet"), "{e}");
        let e = parse(
            "kind = \"aws\"\nlaunch_template = \"g\"\nserver_url = \"http://x\"\nsubnets = [\"s-1\", \"s-2\", \"s-1\"]",
        )
        .unwrap_err();
        assert!(e.contains("subnets") && e.contains("s-1") && e.contains("twice"), "{e}");
        let e = parse("kind = \"aws\"\nserver_url = \"http://x\"").unwrap_err();
        assert!(e.contains("launch_template"), "{e}");
        let e = parse("kind = \"aws\"\nlaunch_template = \"gpu\"\nserver_url = \"10.0.0.1:7878\"").unwrap_err();
        assert!(e.contains("server_url"), "{e}");
        let e = parse("kind = \"aws\"\nlaunch_template = \"g\"\nserver_url = \"http://x\"\nagent_path = \"spillway\"")
            .unwrap_err();
        assert!(e.contains("agent_path"), "{e}");
    }
}
