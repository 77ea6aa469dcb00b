//! Intrusive doubly linked lists over dense node ids: many lists share one
//! arena of links, a node belongs to at most one list at a time, and every
//! operation is O(1). The front of a list is its oldest end (the LRU end),
//! the back its newest (the MRU end). LRU, ARC and the smq-like multiqueue
//! levels are built from these.

/// No node / no list.
pub(crate) const NIL: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Head {
    front: usize,
    back: usize,
    len: usize,
}

/// A set of lists over nodes `0..nodes`.
#[derive(Debug, Clone)]
pub(crate) struct Lists {
    prev: Vec<usize>,
    next: Vec<usize>,
    owner: Vec<usize>,
    heads: Vec<Head>,
}

impl Lists {
    /// `lists` empty lists over `nodes` nodes.
    pub(crate) fn new(nodes: usize, lists: usize) -> Self {
        Lists {
            prev: vec![NIL; nodes],
            next: vec![NIL; nodes],
            owner: vec![NIL; nodes],
            heads: vec![
                Head {
                    front: NIL,
                    back: NIL,
                    len: 0
                };
                lists
            ],
        }
    }

    /// Make room for nodes `0..nodes` (never shrinks).
    pub(crate) fn grow(&mut self, nodes: usize) {
        if nodes > self.owner.len() {
            self.prev.resize(nodes, NIL);
            self.next.resize(nodes, NIL);
            self.owner.resize(nodes, NIL);
        }
    }

    /// Nodes in list `l`.
    pub(crate) fn len(&self, l: usize) -> usize {
        self.heads[l].len
    }

    /// The list node `n` is in.
    pub(crate) fn owner(&self, n: usize) -> Option<usize> {
        let o = self.owner[n];
        (o != NIL).then_some(o)
    }

    /// The oldest node of list `l`.
    pub(crate) fn front(&self, l: usize) -> Option<usize> {
        let f = self.heads[l].front;
        (f != NIL).then_some(f)
    }

    /// The newest node of list `l`.
    pub(crate) fn back(&self, l: usize) -> Option<usize> {
        let b = self.heads[l].back;
        (b != NIL).then_some(b)
    }

    /// The node after `n` (towards the back) in its list.
    #[cfg(test)]
    pub(crate) fn next(&self, n: usize) -> Option<usize> {
        let x = self.next[n];
        (x != NIL).then_some(x)
    }

    /// Append `n` (in no list) at the back of `l`.
    pub(crate) fn push_back(&mut self, l: usize, n: usize) {
        debug_assert_eq!(self.owner[n], NIL, "node {n} is already in a list");
        let h = &mut self.heads[l];
        self.prev[n] = h.back;
        self.next[n] = NIL;
        if h.back == NIL {
            h.front = n;
        } else {
            self.next[h.back] = n;
        }
        h.back = n;
        h.len += 1;
        self.owner[n] = l;
    }

    /// Prepend `n` (in no list) at the front of `l`.
    pub(crate) fn push_front(&mut self, l: usize, n: usize) {
        debug_assert_eq!(self.owner[n], NIL, "node {n} is already in a list");
        let h = &mut self.heads[l];
        self.next[n] = h.front;
        self.prev[n] = NIL;
        if h.front == NIL {
            h.back = n;
        } else {
            self.prev[h.front] = n;
        }
        h.front = n;
        h.len += 1;
        self.owner[n] = l;
    }

    /// Take `n` out of its list (nothing if it is in none).
    pub(crate) fn remove(&mut self, n: usize) {
        let l = self.owner[n];
        if l == NIL {
            return;
        }
        let (p, x) = (self.prev[n], self.next[n]);
        let h = &mut self.heads[l];
        if p == NIL {
            h.front = x;
        } else {
            self.next[p] = x;
        }
        if x == NIL {
            h.back = p;
        } else {
            self.prev[x] = p;
        }
        h.len -= 1;
        self.prev[n] = NIL;
        self.next[n] = NIL;
        self.owner[n] = NIL;
    }

    /// Take the oldest node of `l` out.
    pub(crate) fn pop_front(&mut self, l: usize) -> Option<usize> {
        let f = self.front(l)?;
        self.remove(f);
        Some(f)
    }

    /// Take the newest node of `l` out.
    pub(crate) fn pop_back(&mut self, l: usize) -> Option<usize> {
        let b = self.back(l)?;
        self.remove(b);
        Some(b)
    }

    /// Move `n` (in a list or not) to the back of `l`.
    pub(crate) fn move_to_back(&mut self, l: usize, n: usize) {
        self.remove(n);
        self.push_back(l, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(ls: &Lists, l: usize) -> Vec<usize> {
        let mut v = Vec::new();
        let mut n = ls.front(l);
        while let Some(x) = n {
            v.push(x);
            n = ls.next(x);
        }
        v
    }

    #[test]
    fn sim_lists_keep_order_and_owners() {
        let mut ls = Lists::new(6, 2);
        ls.push_back(0, 1);
        ls.push_back(0, 2);
        ls.push_front(0, 3);
        ls.push_back(1, 4);
        assert_eq!(items(&ls, 0), vec![3, 1, 2]);
        assert_eq!((ls.len(0), ls.len(1)), (3, 1));
        ls.move_to_back(0, 3);
        assert_eq!(items(&ls, 0), vec![1, 2, 3]);
        ls.move_to_back(1, 2);
        assert_eq!(items(&ls, 0), vec![1, 3]);
        assert_eq!(items(&ls, 1), vec![4, 2]);
        assert_eq!(ls.owner(2), Some(1));
        assert_eq!(ls.pop_front(0), Some(1));
        assert_eq!(ls.pop_back(0), Some(3));
        assert_eq!(ls.pop_front(0), None);
        assert_eq!(ls.owner(1), None);
        ls.remove(5); // in no list: nothing happens
        ls.grow(8);
        ls.push_back(0, 7);
        assert_eq!(items(&ls, 0), vec![7]);
    }
}
