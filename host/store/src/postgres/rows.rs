//! One batch's transaction on PostgreSQL, as [`Rows`]: reads go to the
//! server once per row and are kept; writes are kept in memory and sent
//! at the end in one statement per table and kind ([`Overlay::flush`]).
//! Before the batch is applied, the rows its writes will read are fetched
//! in one statement per table ([`Overlay::prefetch`]), so that a batch of
//! many writes costs a few round trips, not a few per write.
//!
//! The batch holds the store's advisory lock (see `PostgresStore::apply`):
//! no other writer changes a row between the read and the flush.

use std::collections::BTreeMap;
use std::ops::Bound;

use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;

use super::schema::{Col, Kind, Owned, from_sql, kinds, name, owned};
use super::sql;
use crate::rows::{Key, Part, Rows, Table};
use crate::{StoreError, Wake};

/// The news for other hosts of a write to `table` (`put`: a row stored,
/// else deleted): a run parked, a deployment or a plugin changed, a
/// tenant's settings changed.
fn news(table: Table, put: bool) -> Option<Wake> {
    match table {
        Table::Parked if put => Some(Wake::Parked),
        Table::Deployments => Some(Wake::Deployed),
        Table::Plugins if put => Some(Wake::Plugins),
        Table::Tenants | Table::Tokens | Table::Secrets => Some(Wake::Settings),
        _ => None,
    }
}

/// A row as this transaction sees it: `None` when it does not exist (or
/// was deleted here), and whether this transaction changed it.
struct Seen {
    value: Option<Vec<u8>>,
    dirty: bool,
}

/// The rows one batch has read and written.
pub(super) struct Overlay<'a> {
    txn: &'a deadpool_postgres::Transaction<'a>,
    rt: &'a Runtime,
    seen: BTreeMap<(Table, Owned), Seen>,
    trips: std::cell::Cell<u64>,
}

/// An array of one key column's values, as a statement's parameter.
enum Array {
    Text(Vec<Vec<u8>>),
    Int(Vec<i64>),
}

impl Array {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Text => Self::Text(Vec::new()),
            Kind::Int => Self::Int(Vec::new()),
        }
    }

    /// Adds `col`, which [`fits`] its column.
    fn push(&mut self, col: &Col) {
        match (self, col) {
            (Self::Text(all), Col::Text(s)) => all.push(s.clone()),
            (Self::Int(all), Col::Int(n)) => all.push(*n),
            _ => {}
        }
    }

    fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Self::Text(all) => all,
            Self::Int(all) => all,
        }
    }
}

/// `key` of `table`, owned, if it has the shape of the table's keys;
/// else the misfit, a bug in `apply`, which names both.
fn fits(table: Table, key: Key<'_>) -> Result<Owned, StoreError> {
    let owned = owned(key);
    let kind = |col: &Col| match col {
        Col::Text(_) => Kind::Text,
        Col::Int(_) => Kind::Int,
    };
    let (first, second) = kinds(table);
    if kind(&owned.0) == first && owned.1.as_ref().map(kind) == second {
        Ok(owned)
    } else {
        Err(StoreError::Codec {
            key: format!("{key:?}"),
            message: format!("not a key of table {table:?}"),
        })
    }
}

/// A key column's value as a parameter.
fn param(col: &Col) -> &(dyn ToSql + Sync) {
    match col {
        Col::Text(s) => s,
        Col::Int(n) => n,
    }
}

/// The key column `at` of `row`, of type `kind`.
fn column(row: &tokio_postgres::Row, at: usize, kind: Kind) -> Result<Col, StoreError> {
    Ok(match kind {
        Kind::Text => Col::Text(row.try_get(at).map_err(sql)?),
        Kind::Int => Col::Int(row.try_get(at).map_err(sql)?),
    })
}

/// The condition that picks rows by the keys in `$1` (and `$2`).
fn by_keys(table: Table) -> String {
    let (first, second) = kinds(table);
    match second {
        None => format!("k1 = ANY($1::{})", first.array()),
        Some(second) => format!(
            "(k1, k2) IN (SELECT * FROM unnest($1::{}, $2::{}))",
            first.array(),
            second.array()
        ),
    }
}

/// The key arrays of `keys`, all of `table`.
fn arrays<'k>(table: Table, keys: impl Iterator<Item = &'k Owned>) -> (Array, Option<Array>) {
    let (first, second) = kinds(table);
    let mut ones = Array::new(first);
    let mut twos = second.map(Array::new);
    for (one, two) in keys {
        ones.push(one);
        if let (Some(twos), Some(two)) = (&mut twos, two) {
            twos.push(two);
        }
    }
    (ones, twos)
}

impl<'a> Overlay<'a> {
    pub(super) fn new(txn: &'a deadpool_postgres::Transaction<'a>, rt: &'a Runtime) -> Self {
        Self {
            txn,
            rt,
            seen: BTreeMap::new(),
            trips: std::cell::Cell::new(0),
        }
    }

    /// How many statements this batch has sent through it: its round
    /// trips to the server.
    pub(super) fn trips(&self) -> u64 {
        self.trips.get()
    }

    fn query(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.trips.set(self.trips.get() + 1);
        self.rt.block_on(async {
            let statement = self.txn.prepare_cached(statement).await.map_err(sql)?;
            self.txn.query(&statement, params).await.map_err(sql)
        })
    }

    fn execute(&self, statement: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        self.trips.set(self.trips.get() + 1);
        self.rt.block_on(async {
            let statement = self.txn.prepare_cached(statement).await.map_err(sql)?;
            self.txn.execute(&statement, params).await.map_err(sql)
        })
    }

    /// Reads the rows `keys` in one statement per table, unless seen
    /// already: later reads of them cost nothing.
    pub(super) fn prefetch(&mut self, keys: &[(Table, Key<'_>)]) -> Result<(), StoreError> {
        let mut wanted: BTreeMap<Table, Vec<Owned>> = BTreeMap::new();
        for (table, key) in keys {
            let key = fits(*table, *key)?;
            if !self.seen.contains_key(&(*table, key.clone())) {
                wanted.entry(*table).or_default().push(key);
            }
        }
        for (table, mut keys) in wanted {
            keys.sort();
            keys.dedup();
            let (first, second) = kinds(table);
            let (ones, twos) = arrays(table, keys.iter());
            let columns = if second.is_some() { "k1, k2" } else { "k1" };
            let statement = format!(
                "SELECT {columns}, v FROM {} WHERE {}",
                name(table),
                by_keys(table)
            );
            let rows = match &twos {
                Some(twos) => self.query(&statement, &[ones.param(), twos.param()])?,
                None => self.query(&statement, &[ones.param()])?,
            };
            let mut found = BTreeMap::new();
            for row in rows {
                let one = column(&row, 0, first)?;
                let (two, at) = match second {
                    Some(kind) => (Some(column(&row, 1, kind)?), 2),
                    None => (None, 1),
                };
                let value: Vec<u8> = row.try_get(at).map_err(sql)?;
                found.insert((one, two), value);
            }
            for key in keys {
                let value = found.remove(&key);
                self.seen.insert(
                    (table, key),
                    Seen {
                        value,
                        dirty: false,
                    },
                );
            }
        }
        Ok(())
    }

    /// Sends what this transaction wrote: per table, one statement for the
    /// rows it stored and one for those it deleted. Returns the news it
    /// makes for other hosts ([`news`]).
    pub(super) fn flush(&mut self) -> Result<Vec<Wake>, StoreError> {
        let mut puts: BTreeMap<Table, Vec<(&Owned, &Vec<u8>)>> = BTreeMap::new();
        let mut deletes: BTreeMap<Table, Vec<&Owned>> = BTreeMap::new();
        for ((table, key), seen) in &self.seen {
            if !seen.dirty {
                continue;
            }
            match &seen.value {
                Some(value) => puts.entry(*table).or_default().push((key, value)),
                None => deletes.entry(*table).or_default().push(key),
            }
        }
        let mut made: Vec<Wake> = Vec::new();
        let tables = puts.keys().map(|t| (*t, true));
        for (table, put) in tables.chain(deletes.keys().map(|t| (*t, false))) {
            if let Some(wake) = news(table, put)
                && !made.contains(&wake)
            {
                made.push(wake);
            }
        }
        for (table, keys) in deletes {
            let (ones, twos) = arrays(table, keys.into_iter());
            let statement = format!("DELETE FROM {} WHERE {}", name(table), by_keys(table));
            match &twos {
                Some(twos) => self.execute(&statement, &[ones.param(), twos.param()])?,
                None => self.execute(&statement, &[ones.param()])?,
            };
        }
        for (table, rows) in puts {
            let (first, second) = kinds(table);
            let (ones, twos) = arrays(table, rows.iter().map(|(key, _)| *key));
            let values: Vec<&[u8]> = rows.iter().map(|(_, value)| value.as_slice()).collect();
            let statement = match second {
                Some(second) => format!(
                    "INSERT INTO {} (k1, k2, v) SELECT * FROM unnest($1::{}, $2::{}, $3::bytea[]) \
                     ON CONFLICT (k1, k2) DO UPDATE SET v = EXCLUDED.v",
                    name(table),
                    first.array(),
                    second.array()
                ),
                None => format!(
                    "INSERT INTO {} (k1, v) SELECT * FROM unnest($1::{}, $2::bytea[]) \
                     ON CONFLICT (k1) DO UPDATE SET v = EXCLUDED.v",
                    name(table),
                    first.array()
                ),
            };
            match &twos {
                Some(twos) => self.execute(&statement, &[ones.param(), twos.param(), &values])?,
                None => self.execute(&statement, &[ones.param(), &values])?,
            };
        }
        Ok(made)
    }

    /// The rows of `table` seen here with first key part `first`.
    fn seen_under(&self, table: Table, first: &Col) -> impl Iterator<Item = (&Option<Col>, &Seen)> {
        let start = (table, (first.clone(), None));
        self.seen
            .range((Bound::Included(start), Bound::Unbounded))
            .take_while(move |((t, (one, _)), _)| *t == table && one == first)
            .map(|((_, (_, two)), seen)| (two, seen))
    }
}

impl Rows for Overlay<'_> {
    fn get(&mut self, table: Table, key: Key<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let key = fits(table, key)?;
        if let Some(seen) = self.seen.get(&(table, key.clone())) {
            return Ok(seen.value.clone());
        }
        let statement = match &key.1 {
            Some(_) => format!("SELECT v FROM {} WHERE k1 = $1 AND k2 = $2", name(table)),
            None => format!("SELECT v FROM {} WHERE k1 = $1", name(table)),
        };
        let rows = match &key.1 {
            Some(two) => self.query(&statement, &[param(&key.0), param(two)])?,
            None => self.query(&statement, &[param(&key.0)])?,
        };
        let value = match rows.first() {
            Some(row) => Some(row.try_get::<_, Vec<u8>>(0).map_err(sql)?),
            None => None,
        };
        self.seen.insert(
            (table, key),
            Seen {
                value: value.clone(),
                dirty: false,
            },
        );
        Ok(value)
    }

    fn put(&mut self, table: Table, key: Key<'_>, value: &[u8]) -> Result<(), StoreError> {
        self.seen.insert(
            (table, fits(table, key)?),
            Seen {
                value: Some(value.to_vec()),
                dirty: true,
            },
        );
        Ok(())
    }

    fn delete(&mut self, table: Table, key: Key<'_>) -> Result<bool, StoreError> {
        let existed = self.has(table, key)?;
        let key = fits(table, key)?;
        // A row that was not there is left alone (no statement, and no
        // news of it), unless this transaction deleted it already.
        let dirty = existed
            || self
                .seen
                .get(&(table, key.clone()))
                .is_some_and(|s| s.dirty);
        self.seen.insert((table, key), Seen { value: None, dirty });
        Ok(existed)
    }

    fn values(&mut self, table: Table) -> Result<Vec<Vec<u8>>, StoreError> {
        let (first, second) = kinds(table);
        let statement = match second {
            Some(_) => format!("SELECT k1, k2, v FROM {}", name(table)),
            None => format!("SELECT k1, NULL::bigint, v FROM {}", name(table)),
        };
        let mut rows = BTreeMap::new();
        for row in self.query(&statement, &[])? {
            let one = column(&row, 0, first)?;
            let two = second.map(|kind| column(&row, 1, kind)).transpose()?;
            rows.insert((one, two), row.try_get::<_, Vec<u8>>(2).map_err(sql)?);
        }
        for ((_, key), seen) in self.seen.iter().filter(|((t, _), _)| *t == table) {
            match &seen.value {
                Some(value) => rows.insert(key.clone(), value.clone()),
                None => rows.remove(key),
            };
        }
        Ok(rows.into_values().collect())
    }

    fn under(&mut self, table: Table, first: &str) -> Result<Vec<(Part, Vec<u8>)>, StoreError> {
        let (_, Some(second)) = kinds(table) else {
            return Err(StoreError::Codec {
                key: first.to_owned(),
                message: format!("table {table:?} has one key part"),
            });
        };
        let statement = format!(
            "SELECT k2, v FROM {} WHERE k1 = $1 ORDER BY k2",
            name(table)
        );
        let first = Col::Text(first.as_bytes().to_vec());
        let mut rows = BTreeMap::new();
        for row in self.query(&statement, &[param(&first)])? {
            let two = column(&row, 0, second)?;
            rows.insert(two, row.try_get::<_, Vec<u8>>(1).map_err(sql)?);
        }
        for (two, seen) in self.seen_under(table, &first) {
            let Some(two) = two else { continue };
            match &seen.value {
                Some(value) => rows.insert(two.clone(), value.clone()),
                None => rows.remove(two),
            };
        }
        Ok(rows
            .into_iter()
            .map(|(two, value)| {
                let part = match two {
                    Col::Int(n) => Part::U64(from_sql(n)),
                    Col::Text(s) => Part::Str(String::from_utf8_lossy(&s).into_owned()),
                };
                (part, value)
            })
            .collect())
    }

    fn first_under(
        &mut self,
        table: Table,
        first: &str,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        let (_, Some(Kind::Text)) = kinds(table) else {
            return Err(StoreError::Codec {
                key: first.to_owned(),
                message: format!("table {table:?} is not keyed (text, text)"),
            });
        };
        let first = Col::Text(first.as_bytes().to_vec());
        // Rows this transaction deleted may be among the first: read as
        // many more as it has seen under `first`.
        let seen = self.seen_under(table, &first).count();
        let limit = i64::try_from(n.saturating_add(seen)).unwrap_or(i64::MAX);
        let statement = format!(
            "SELECT k2 FROM {} WHERE k1 = $1 ORDER BY k2 LIMIT $2",
            name(table)
        );
        let mut keys = std::collections::BTreeSet::new();
        for row in self.query(&statement, &[param(&first), &limit])? {
            keys.insert(row.try_get::<_, Vec<u8>>(0).map_err(sql)?);
        }
        for (two, seen) in self.seen_under(table, &first) {
            let Some(Col::Text(two)) = two else { continue };
            if seen.value.is_some() {
                keys.insert(two.clone());
            } else {
                keys.remove(two);
            }
        }
        Ok(keys
            .into_iter()
            .take(n)
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect())
    }

    fn keys_between(
        &mut self,
        table: Table,
        from: &str,
        to: &str,
    ) -> Result<Vec<String>, StoreError> {
        let statement = format!(
            "SELECT k1 FROM {} WHERE k1 >= $1 AND k1 < $2 ORDER BY k1",
            name(table)
        );
        let (from, to) = (from.as_bytes().to_vec(), to.as_bytes().to_vec());
        let mut keys = std::collections::BTreeSet::new();
        for row in self.query(&statement, &[&from, &to])? {
            keys.insert(row.try_get::<_, Vec<u8>>(0).map_err(sql)?);
        }
        let start = (table, (Col::Text(from), None));
        let end = (table, (Col::Text(to), None));
        for ((_, (one, _)), seen) in self.seen.range(start..end) {
            if let Col::Text(key) = one {
                if seen.value.is_some() {
                    keys.insert(key.clone());
                } else {
                    keys.remove(key);
                }
            }
        }
        Ok(keys
            .into_iter()
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect())
    }

    fn last_number(&mut self, table: Table) -> Result<Option<u64>, StoreError> {
        // The greatest key that this transaction has not deleted.
        let deleted: Vec<i64> = self
            .seen
            .iter()
            .filter(|((t, _), seen)| *t == table && seen.value.is_none())
            .filter_map(|((_, (one, _)), _)| match one {
                Col::Int(n) => Some(*n),
                Col::Text(_) => None,
            })
            .collect();
        let statement = format!(
            "SELECT k1 FROM {} WHERE NOT (k1 = ANY($1::int8[])) ORDER BY k1 DESC LIMIT 1",
            name(table)
        );
        let stored = match self.query(&statement, &[&deleted])?.first() {
            Some(row) => Some(row.try_get::<_, i64>(0).map_err(sql)?),
            None => None,
        };
        let written = self
            .seen
            .iter()
            .filter(|((t, _), seen)| *t == table && seen.value.is_some())
            .filter_map(|((_, (one, _)), _)| match one {
                Col::Int(n) => Some(*n),
                Col::Text(_) => None,
            })
            .max();
        Ok(stored.max(written).map(from_sql))
    }
}
