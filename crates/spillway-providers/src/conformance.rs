//! The behaviour every [`Provider`] must have, as test support: each provider's tests call [`run_conformance`]
//! (and [`check_capacity`] where capacity can be limited). Failures panic with a message naming the provider and
//! the broken rule; whatever was launched is terminated even then.

use std::cell::RefCell;

use crate::{Instance, LaunchSpec, Provider, ProviderError};

/// Terminates every instance it was told about when dropped, so a failed check (a panic) leaves nothing running.
struct Cleanup<'a> {
    provider: &'a dyn Provider,
    ids: RefCell<Vec<String>>,
}

impl<'a> Cleanup<'a> {
    fn new(provider: &'a dyn Provider) -> Self {
        Cleanup { provider, ids: RefCell::new(Vec::new()) }
    }

    /// Launches `spec`, remembering the instance for cleanup; panics naming `step` on error.
    fn launch(&self, spec: &LaunchSpec, step: &str) -> Instance {
        let result = self.provider.launch(spec);
        let instance = result
            .unwrap_or_else(|e| panic!("{}: {step}: launch of node {} failed: {e}", self.provider.name(), spec.node));
        self.track(&instance.id);
        instance
    }

    fn track(&self, id: &str) {
        let mut ids = self.ids.borrow_mut();
        if !ids.iter().any(|known| known == id) {
            ids.push(id.to_string());
        }
    }

    /// Terminates `id` and panics unless that succeeds.
    fn terminate(&self, id: &str, step: &str) {
        if let Err(e) = self.provider.terminate(id) {
            panic!("{}: {step}: terminate {id} failed: {e}", self.provider.name());
        }
        self.ids.borrow_mut().retain(|known| known != id);
    }

    /// Terminates everything still tracked, panicking on the first failure.
    fn finish(&self, step: &str) {
        let ids = self.ids.borrow().clone();
        for id in ids {
            self.terminate(&id, step);
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // Best effort on the panic path; errors here would only hide the original failure.
        for id in self.ids.borrow().iter() {
            let _ = self.provider.terminate(id);
        }
    }
}

fn list(provider: &dyn Provider, cluster: &str, step: &str) -> Vec<Instance> {
    provider.list(cluster).unwrap_or_else(|e| panic!("{}: {step}: list({cluster:?}) failed: {e}", provider.name()))
}

fn nodes(instances: &[Instance]) -> Vec<u32> {
    instances.iter().map(|i| i.node).collect()
}

/// Panics unless `instance` is what `spec` asked for.
fn assert_matches(provider: &dyn Provider, instance: &Instance, spec: &LaunchSpec) {
    let expected = (&spec.cluster, spec.node, &spec.pool, &spec.instance_type, spec.gpus, spec.spot);
    let got = (&instance.cluster, instance.node, &instance.pool, &instance.instance_type, instance.gpus, instance.spot);
    assert_eq!(got, expected, "{}: launched instance {instance:?} does not match its spec", provider.name());
    assert!(!instance.id.is_empty(), "{}: launched instance has an empty id", provider.name());
}

fn spec_for(provider: &dyn Provider, cluster: &str, spec: &impl Fn(u32) -> LaunchSpec, node: u32) -> LaunchSpec {
    let s = spec(node);
    assert_eq!(s.cluster, cluster, "{}: conformance spec({node}) must be for cluster {cluster}", provider.name());
    assert_eq!(s.node, node, "{}: conformance spec({node}) must be for node {node}", provider.name());
    s
}

/// Checks the [`Provider`] contract on `cluster` (which must be fresh, with no instances), using `spec(node)` to
/// build launch specs. Panics with a message naming the broken rule. Launches nodes 1-3 and terminates all of
/// them before returning.
pub fn run_conformance(provider: &dyn Provider, cluster: &str, spec: impl Fn(u32) -> LaunchSpec) {
    let name = provider.name();
    let other = format!("{cluster}-other");
    let cleanup = Cleanup::new(provider);

    let before = list(provider, cluster, "fresh cluster");
    assert!(before.is_empty(), "{name}: list of fresh cluster {cluster} is not empty: {before:?}");

    let spec1 = spec_for(provider, cluster, &spec, 1);
    let a = cleanup.launch(&spec1, "first launch");
    assert_matches(provider, &a, &spec1);
    let listed = list(provider, cluster, "after first launch");
    assert_eq!(listed, vec![a.clone()], "{name}: list after launching node 1 must show exactly it");

    let again = cleanup.launch(&spec1, "relaunch of the same node");
    assert_eq!(again, a, "{name}: launching node 1 twice must return the same instance");
    let listed = list(provider, cluster, "after relaunch");
    assert_eq!(listed.len(), 1, "{name}: launching node 1 twice created a second instance: {listed:?}");

    // Launch out of order so "node order" cannot be launch order by accident.
    let spec3 = spec_for(provider, cluster, &spec, 3);
    let spec2 = spec_for(provider, cluster, &spec, 2);
    let c = cleanup.launch(&spec3, "launch of node 3");
    let b = cleanup.launch(&spec2, "launch of node 2");
    assert_matches(provider, &c, &spec3);
    assert_matches(provider, &b, &spec2);
    let ids = [&a.id, &b.id, &c.id];
    assert!(a.id != b.id && b.id != c.id && a.id != c.id, "{name}: instance ids are not distinct: {ids:?}");
    let listed = list(provider, cluster, "after three launches");
    assert_eq!(nodes(&listed), vec![1, 2, 3], "{name}: list must give every instance once, in node order");
    assert_eq!(listed, vec![a.clone(), b.clone(), c.clone()], "{name}: listed instances differ from launched");

    let foreign = list(provider, &other, "other cluster");
    assert!(
        foreign.iter().all(|i| !ids.contains(&&i.id) && i.cluster != cluster),
        "{name}: list({other:?}) shows instances of {cluster}: {foreign:?}"
    );

    cleanup.terminate(&b.id, "terminate node 2");
    let listed = list(provider, cluster, "after terminate");
    assert_eq!(nodes(&listed), vec![1, 3], "{name}: terminated node 2 is still listed");

    match provider.terminate(&b.id) {
        Err(ProviderError::NotFound(_)) => {}
        other => panic!("{name}: terminating {} twice must be NotFound, got {other:?}", b.id),
    }
    let unknown = format!("{}-no-such-instance", a.id);
    match provider.terminate(&unknown) {
        Err(ProviderError::NotFound(_)) => {}
        other => panic!("{name}: terminating unknown id {unknown} must be NotFound, got {other:?}"),
    }

    cleanup.finish("final cleanup");
    let after = list(provider, cluster, "after cleanup");
    assert!(after.is_empty(), "{name}: instances left after terminating everything: {after:?}");
}

/// Checks that `provider` enforces a capacity of `limit` instances of `spec`'s instance type: launching nodes
/// `1..=limit` works, node `limit + 1` gets [`ProviderError::InsufficientCapacity`], and terminating one makes
/// room for it. `cluster` must be fresh and every `spec(node)` of the same instance type. Terminates everything
/// it launched.
pub fn check_capacity(provider: &dyn Provider, cluster: &str, spec: impl Fn(u32) -> LaunchSpec, limit: u32) {
    let name = provider.name();
    let cleanup = Cleanup::new(provider);
    let first = spec_for(provider, cluster, &spec, 1);
    let mut launched = Vec::new();
    for node in 1..=limit {
        let s = spec_for(provider, cluster, &spec, node);
        assert_eq!(s.instance_type, first.instance_type, "{name}: check_capacity needs one instance type");
        launched.push(cleanup.launch(&s, &format!("launch {node} of limit {limit}")));
    }

    let extra = spec_for(provider, cluster, &spec, limit + 1);
    assert_eq!(extra.instance_type, first.instance_type, "{name}: check_capacity needs one instance type");
    match provider.launch(&extra) {
        Err(ProviderError::InsufficientCapacity { instance_type }) => assert_eq!(
            instance_type, extra.instance_type,
            "{name}: InsufficientCapacity must name the instance type asked for"
        ),
        Ok(instance) => {
            cleanup.track(&instance.id);
            panic!("{name}: launch beyond the capacity of {limit} succeeded: {instance:?}");
        }
        Err(e) => panic!("{name}: launch beyond capacity must be InsufficientCapacity, got {e:?}"),
    }

    if let Some(freed) = launched.first() {
        cleanup.terminate(&freed.id, "terminate to free capacity");
        let instance = cleanup.launch(&extra, "launch after freeing capacity");
        assert_matches(provider, &instance, &extra);
    }
    let listed = list(provider, cluster, "after capacity check");
    assert_eq!(listed.len(), limit as usize, "{name}: expected {limit} instances at capacity: {listed:?}");

    cleanup.finish("final cleanup");
    let after = list(provider, cluster, "after cleanup");
    assert!(after.is_empty(), "{name}: instances left after terminating everything: {after:?}");
}
