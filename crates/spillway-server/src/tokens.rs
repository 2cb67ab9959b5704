//! Node tokens: each launch gets a fresh token (`NodeToken`), which reaches the agent the provider's way (the
//! local provider's stdin; a cloud's user-data, which any process on the instance can read back from the metadata
//! service). An agent that says it takes session tokens gets, on a heartbeat with its launch token, a session
//! token (`NodeSession`) that never leaves its memory, and no work; its first heartbeat with the session token
//! voids the launch token (`NodeTokenRetired`) and gets work. So no job runs on a node whose launch token still
//! counts. A lost reply costs nothing: the next launch-token heartbeat gets a new session token (the earlier one is
//! void). Every step is logged, so a restart agrees. Agents that do not take session tokens (older versions) keep
//! their launch token, as before.

use crate::state::{ApplyError, State};
use crate::store::Entry;
use spillway_core::Time;

/// What the token a heartbeat came with is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenUse {
    /// Not (or no longer) a token of the node: the heartbeat is refused.
    Void,
    /// The node's launch token, from an agent that takes session tokens: here is its session token; no work yet.
    Launch(String),
    /// The token the node works with.
    Current,
}

impl State {
    /// Makes `hash` node `n`'s launch token: its only valid one (every earlier token of the node is void).
    pub(crate) fn launch_token(&mut self, n: u32, hash: String) {
        if let Some(old) = self.launch_tokens.remove(&n) {
            self.token_nodes.remove(&old);
        }
        self.set_token_hash(n, hash.clone());
        self.launch_tokens.insert(n, hash);
    }

    /// Voids node `n`'s launch token (its agent has moved to its session token).
    pub(crate) fn retire_launch_token(&mut self, n: u32) {
        if let Some(old) = self.launch_tokens.remove(&n)
            && self.token_hashes.get(&n) != Some(&old)
        {
            self.token_nodes.remove(&old);
        }
    }

    /// Decides what a heartbeat of node `n` that came with the token whose hash is `used` may do, and moves the
    /// node's tokens along (see the module doc); `sessions`: the agent takes session tokens. Checked under the
    /// same lock as the heartbeat itself, so a token voided since the request came in is refused.
    pub fn rotate_token(&mut self, now: Time, n: u32, used: &str, sessions: bool) -> Result<TokenUse, ApplyError> {
        if self.token_nodes.get(used) != Some(&n) {
            return Ok(TokenUse::Void);
        }
        let on_launch = self.launch_tokens.get(&n).is_some_and(|h| h == used);
        if on_launch && sessions && self.alive(n) {
            let token = crate::datadir::new_token()
                .map_err(|e| ApplyError::Engine(format!("no randomness for a session token: {e}")))?;
            self.apply(now, Entry::NodeSession { node: n, hash: crate::datadir::token_hash(&token) })?;
            return Ok(TokenUse::Launch(token));
        }
        if !on_launch && self.launch_tokens.contains_key(&n) {
            self.apply(now, Entry::NodeTokenRetired { node: n })?;
        }
        Ok(TokenUse::Current)
    }
}
