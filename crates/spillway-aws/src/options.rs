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

impl AwsOptions {
    /// Reads the `[provider]` table of config `file`; errors name the file and the key.
    pub fn from_table(file: &str, table: &toml::Table) -> Result<AwsOptions, String> {
        let opts: AwsOptions =
            table.clone().try_into().map_err(|e: toml::de::Error| format!("{file}: [provider]: {}", e.message()))?;
        if opts.kind != "aws" {
            return Err(format!("{file}: [provider] kind is {:?}, not \"aws\"", opts.kind));
        }
        if opts.launch_template.trim().is_empty() {
            return Err(format!("{file}: [provider] launch_template is empty"));
        }
        if !(opts.server_url.starts_with("http://") || opts.server_url.starts_with("https://")) {
            return Err(format!(
                "{file}: [provider] server_url {:?} must start with http:// or https://",
                opts.server_url
            ));
        }
        for (key, value) in [("agent_path", &opts.agent_path), ("agent_data_dir", &opts.agent_data_dir)] {
            if !value.starts_with('/') {
                return Err(format!("{file}: [provider] {key} {value:?} must be an absolute path"));
            }
        }
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AwsOptions, String> {
        AwsOptions::from_table("c.toml", &text.parse::<toml::Table>().map_err(|e| e.to_string())?)
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
        let e = parse("kind = \"aws\"\nserver_url = \"http://x\"").unwrap_err();
        assert!(e.contains("launch_template"), "{e}");
        let e = parse("kind = \"aws\"\nlaunch_template = \"gpu\"\nserver_url = \"10.0.0.1:7878\"").unwrap_err();
        assert!(e.contains("server_url"), "{e}");
        let e = parse("kind = \"aws\"\nlaunch_template = \"g\"\nserver_url = \"http://x\"\nagent_path = \"spillway\"")
            .unwrap_err();
        assert!(e.contains("agent_path"), "{e}");
    }
}
