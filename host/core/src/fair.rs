//! Taking tenants in turn: one queue per tenant, served round the ring,
//! each tenant up to its weight in a row before the next one's turn
//! (weighted round robin). One tenant's flood then waits behind itself,
//! and another tenant's lone item waits at most one turn of each tenant.
//!
//! The engine's ready queue and its parked runs, and the group commit's
//! waiting writes, are each one `Lanes`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The lane of items that belong to no tenant (a timer's fire, a
/// delivery's move, a lease): served in turn like a tenant.
pub const UNTENANTED: &str = "";

/// [`UNTENANTED`], shared: the lane name to file such items under,
/// without a new allocation each time.
pub fn untenanted() -> Arc<str> {
    static LANE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    Arc::clone(LANE.get_or_init(|| Arc::from(UNTENANTED)))
}

/// Items of several tenants, taken in turn.
#[derive(Debug)]
pub struct Lanes<T> {
    lanes: HashMap<Arc<str>, VecDeque<T>>,
    /// The tenants with items, in turn order; the front's turn is on.
    ring: VecDeque<Arc<str>>,
    /// How many the front of the ring took in its current turn.
    taken: u32,
    len: usize,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Self {
            lanes: HashMap::new(),
            ring: VecDeque::new(),
            taken: 0,
            len: 0,
        }
    }
}

impl<T> Lanes<T> {
    /// Queues `item` at the back of `tenant`'s lane.
    pub fn push(&mut self, tenant: &Arc<str>, item: T) {
        let lane = self.lanes.entry(Arc::clone(tenant)).or_default();
        if lane.is_empty() {
            self.ring.push_back(Arc::clone(tenant));
        }
        lane.push_back(item);
        self.len += 1;
    }

    /// How many items wait, over every lane.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no item waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many items of `tenant` wait.
    pub fn len_of(&self, tenant: &str) -> usize {
        self.lanes.get(tenant).map_or(0, VecDeque::len)
    }

    /// The fewest items any tenant but `except` has waiting (`None`: no
    /// such tenant has any).
    pub fn shortest(&self, except: &str) -> Option<usize> {
        self.lanes
            .iter()
            .filter(|(tenant, _)| &***tenant != except)
            .map(|(_, lane)| lane.len())
            .min()
    }

    /// The most items any tenant has waiting (0: none has any).
    pub fn longest(&self) -> usize {
        self.lanes
            .values()
            .map(|lane| lane.len())
            .max()
            .unwrap_or(0)
    }

    /// How many tenants have items waiting.
    pub fn tenants(&self) -> usize {
        self.ring.len()
    }

    /// The next item in turn, of a tenant that `may` lets go now (a
    /// tenant it refuses keeps its items and goes to the back of the
    /// ring); `weight` gives each tenant's items per turn (at least one).
    pub fn pop_where(
        &mut self,
        weight: impl Fn(&str) -> u32,
        may: impl Fn(&str) -> bool,
    ) -> Option<T> {
        for _ in 0..self.ring.len() {
            let tenant = Arc::clone(self.ring.front()?);
            if !may(&tenant) {
                self.ring.rotate_left(1);
                self.taken = 0;
                continue;
            }
            let lane = self.lanes.get_mut(&tenant)?;
            let item = lane.pop_front();
            self.len -= usize::from(item.is_some());
            self.taken += 1;
            if lane.is_empty() {
                self.lanes.remove(&tenant);
                self.ring.pop_front();
                self.taken = 0;
            } else if self.taken >= weight(&tenant).max(1) {
                self.ring.rotate_left(1);
                self.taken = 0;
            }
            return item;
        }
        None
    }

    /// [`pop_where`](Self::pop_where) with every tenant let go.
    pub fn pop(&mut self, weight: impl Fn(&str) -> u32) -> Option<T> {
        self.pop_where(weight, |_| true)
    }

    /// Takes out the item at `index`, counting in ring order and then lane
    /// order: how a simulator picks.
    pub fn remove(&mut self, index: usize) -> Option<T> {
        let mut skipped = 0;
        for (at, tenant) in self.ring.iter().enumerate() {
            let lane = self.lanes.get_mut(tenant)?;
            if index < skipped + lane.len() {
                let item = lane.remove(index - skipped);
                self.len -= usize::from(item.is_some());
                if lane.is_empty() {
                    let tenant = Arc::clone(tenant);
                    self.lanes.remove(&tenant);
                    self.ring.remove(at);
                    if at == 0 {
                        self.taken = 0;
                    }
                }
                return item;
            }
            skipped += lane.len();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn a_flood_of_one_tenant_waits_behind_itself() {
        let mut lanes = Lanes::default();
        for n in 0..1000 {
            lanes.push(&t("a"), ("a", n));
        }
        lanes.push(&t("b"), ("b", 0));
        let first: Vec<_> = (0..3).filter_map(|_| lanes.pop(|_| 1)).collect();
        assert_eq!(first, [("a", 0), ("b", 0), ("a", 1)]);
        assert_eq!(lanes.len(), 998);
    }

    #[test]
    fn a_weight_is_items_per_turn_and_a_refused_tenant_keeps_its_items() {
        let mut lanes = Lanes::default();
        for n in 0..4 {
            lanes.push(&t("a"), ("a", n));
            lanes.push(&t("b"), ("b", n));
        }
        let weight = |tenant: &str| if tenant == "a" { 3 } else { 1 };
        let order: Vec<_> = (0..5).filter_map(|_| lanes.pop(weight)).collect();
        assert_eq!(order, [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("a", 3)]);
        assert_eq!(lanes.pop_where(weight, |t| t != "b"), None);
        assert_eq!(lanes.len(), 3);
        assert_eq!(lanes.remove(1), Some(("b", 2)));
        assert_eq!(lanes.pop(weight), Some(("b", 1)));
        assert_eq!(lanes.pop(weight), Some(("b", 3)));
        assert!(lanes.is_empty());
    }

    #[test]
    fn the_shortest_lane_leaves_out_the_one_asked() {
        let mut lanes = Lanes::default();
        assert_eq!(lanes.shortest(UNTENANTED), None);
        lanes.push(&untenanted(), 0);
        assert_eq!(lanes.shortest(UNTENANTED), None);
        for n in 0..5 {
            lanes.push(&t("a"), n);
        }
        lanes.push(&t("b"), 0);
        lanes.push(&t("b"), 1);
        assert_eq!(lanes.shortest(UNTENANTED), Some(2));
        assert_eq!(lanes.shortest("b"), Some(1));
    }
}
