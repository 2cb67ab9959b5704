//! Node tokens: each launch gets a fresh token (`NodeToken`), which reaches the agent the provider's way (the
//! local provider's stdin; a cloud's user-data, which any process on the instance can read back from the metadata
//! service). So the launch token is only good for the agent's first heartbeat: the reply hands the agent a session
//! token (`NodeSession`), which never leaves its memory, and the agent's first heartbeat with it voids the launch
//! token (`NodeTokenRetired`). A lost reply costs nothing: a heartbeat still on the launch token gets the same
//! session token again (or, after a daemon restart, a new one). Every step is logged, so a restart agrees.

use crate::state::{ApplyError, State};
use crate::store::Entry;
use spillway_core::Time;

impl State {
    /// Makes `hash` node `n`'s launch token: its only valid one (every earlier token of the node is void).
    pub(crate) fn launch_token(&mut self, n: u32, hash: String) {
        if let Some(old) = self.launch_tokens.remove(&n) {
            self.token_nodes.remove(&old);
        }
        self.sessions.remove(&n);
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
        self.sessions.remove(&n);
    }

    /// Moves node `n`'s agent along after a heartbeat it sent with the token whose hash is `used`: on its launch
    /// token, returns the session token to switch to; on its session token, retires the launch token. Returns
    /// `None` when there is nothing to hand out.
    pub fn rotate_token(&mut self, now: Time, n: u32, used: &str) -> Result<Option<String>, ApplyError> {
        let Some(launch) = self.launch_tokens.get(&n).filter(|_| self.alive(n)) else { return Ok(None) };
        if launch == used {
            if let Some(session) = self.sessions.get(&n) {
                return Ok(Some(session.clone()));
            }
            let token = crate::datadir::new_token()
                .map_err(|e| ApplyError::Engine(format!("no randomness for a session token: {e}")))?;
            let hash = crate::datadir::token_hash(&token);
            self.apply(now, Entry::NodeSession { node: n, hash })?;
            self.sessions.insert(n, token.clone());
            return Ok(Some(token));
        }
        if self.token_hashes.get(&n).is_some_and(|current| current == used) {
            self.apply(now, Entry::NodeTokenRetired { node: n })?;
        }
        Ok(None)
    }
}
