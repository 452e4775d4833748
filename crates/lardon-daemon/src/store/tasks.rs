//! Tasks: insert (one or in bulk), read, list, remove, clean.

use super::unit::Unit;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter, types::Value};

use super::error::{Ctx, StoreError};
use super::events::{EventKind, push_event};
use super::{DecisionRecord, Progress, Store, TaskRecord, to_i64, to_u64};
use crate::spec::{DepKind, TaskId, TaskSpec, TaskState};

/// A task to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    /// Its spec (validate it first with [`TaskSpec::validate`]).
    pub spec: TaskSpec,
    /// Start PAUSED instead of PENDING.
    pub paused: bool,
}

impl NewTask {
    /// A pending task for `spec`.
    pub fn new(spec: TaskSpec) -> NewTask {
        NewTask { spec, paused: false }
    }
}

/// A task [`Store::insert_tasks_resolved`] inserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inserted {
    /// Its new id.
    pub id: TaskId,
    /// Its dependencies, each an existing task.
    pub deps: Vec<StoredDep>,
}

/// A dependency of a task being inserted, as stored at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredDep {
    /// The task depended on.
    pub id: TaskId,
    /// Wait for its success, or for any end.
    pub kind: DepKind,
    /// Its state in the inserting transaction.
    pub state: TaskState,
}

/// Which tasks [`Store::list_tasks`] returns (every given criterion must
/// hold; empty means no constraint).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only these ids.
    pub ids: Vec<TaskId>,
    /// Only these states.
    pub states: Vec<TaskState>,
    /// Only this class.
    pub class: Option<String>,
    /// Only names containing this text.
    pub name_contains: Option<String>,
    /// Only tasks of this group.
    pub group: Option<String>,
    /// At most this many (lowest ids first).
    pub limit: Option<u32>,
}

/// Columns read for a [`TaskRecord`], in [`RawTask::from_row`]'s order.
pub(super) const TASK_COLUMNS: &str = "id, spec, state, paused_running, state_reason, attempts, created_ms, \
     started_ms, finished_ms, exit_code, progress_done, progress_total, progress_message, cursor, \
     decision_kind, decision_code, decision_message, decision_batch, decision_ms, run_handle, memory_retries, \
     overrun_note, env";

/// Decision columns: kind, code, message, batch, time.
type RawDecision = (Option<String>, Option<String>, Option<String>, Option<i64>, Option<i64>);

/// A row before decoding (decoding errors are ours, not SQLite's).
pub(super) struct RawTask {
    id: i64,
    spec: String,
    state: String,
    paused_running: bool,
    state_reason: Option<String>,
    attempts: i64,
    created_ms: i64,
    started_ms: Option<i64>,
    finished_ms: Option<i64>,
    exit_code: Option<i32>,
    progress: (i64, i64, String),
    cursor: i64,
    decision: RawDecision,
    run_handle: Option<String>,
    memory_retries: i64,
    overrun_note: Option<String>,
    env: Option<Vec<u8>>,
}

impl RawTask {
    /// How many columns [`TASK_COLUMNS`] names (a query reading more puts
    /// them after these).
    pub(super) const COLUMNS: usize = 23;

    pub(super) fn from_row(r: &Row<'_>) -> rusqlite::Result<RawTask> {
        Ok(RawTask {
            id: r.get(0)?,
            spec: r.get(1)?,
            state: r.get(2)?,
            paused_running: r.get(3)?,
            state_reason: r.get(4)?,
            attempts: r.get(5)?,
            created_ms: r.get(6)?,
            started_ms: r.get(7)?,
            finished_ms: r.get(8)?,
            exit_code: r.get(9)?,
            progress: (r.get(10)?, r.get(11)?, r.get(12)?),
            cursor: r.get(13)?,
            decision: (r.get(14)?, r.get(15)?, r.get(16)?, r.get(17)?, r.get(18)?),
            run_handle: r.get(19)?,
            memory_retries: r.get(20)?,
            overrun_note: r.get(21)?,
            env: r.get(22)?,
        })
    }

    pub(super) fn decode(self) -> Result<TaskRecord, StoreError> {
        let id = TaskId(to_u64(self.id, "task id")?);
        let corrupt =
            |what: &str, detail: String| StoreError::Corrupt { what: format!("task {id} {what}"), detail };
        let mut spec: TaskSpec =
            serde_json::from_str(&self.spec).map_err(|e| corrupt("spec", e.to_string()))?;
        spec.submit_env = self
            .env
            .map(crate::submit_env::SubmitEnv::from_blob)
            .transpose()
            .map_err(|e| corrupt("env", e.to_string()))?;
        let state: TaskState =
            crate::spec::parse_state(&self.state).map_err(|e| corrupt("state", e.to_string()))?;
        let (kind, code, message, batch, at_ms) = self.decision;
        let last_decision = match (kind, at_ms) {
            (Some(kind), Some(at_ms)) => Some(DecisionRecord {
                kind: crate::spec::parse_decision(&kind).map_err(|e| corrupt("decision", e.to_string()))?,
                reason_code: code.unwrap_or_default(),
                message: message.unwrap_or_default(),
                batch: batch.map(|b| to_u64(b, "decision batch")).transpose()?,
                at_ms,
            }),
            _ => None,
        };
        Ok(TaskRecord {
            id,
            spec,
            state,
            paused_running: self.paused_running,
            state_reason: self.state_reason,
            attempts: u32::try_from(self.attempts)
                .map_err(|_| corrupt("attempts", self.attempts.to_string()))?,
            created_ms: self.created_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            exit_code: self.exit_code,
            progress: Progress {
                done: to_u64(self.progress.0, "progress done")?,
                total: to_u64(self.progress.1, "progress total")?,
                message: self.progress.2,
            },
            cursor: to_u64(self.cursor, "cursor")?,
            last_decision,
            run_handle: self.run_handle,
            memory_retries: u32::try_from(self.memory_retries)
                .map_err(|_| corrupt("memory retries", self.memory_retries.to_string()))?,
            overrun_note: self.overrun_note,
        })
    }
}

/// Runs a task query and decodes every row.
pub(super) fn query_tasks(
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    op: &'static str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).ctx(op)?;
    let raws = stmt.query_map(params, RawTask::from_row).ctx(op)?.collect::<Result<Vec<_>, _>>().ctx(op)?;
    raws.into_iter().map(RawTask::decode).collect()
}

/// Inserts one task inside `tx`, taking the next number from the counter.
fn insert_one(tx: &Connection, new: &NewTask, now: i64, max_events: u64) -> Result<Inserted, StoreError> {
    const OP: &str = "insert task";
    let next: i64 = tx
        .prepare_cached("SELECT value FROM meta WHERE key = 'next_task_number'")
        .ctx(OP)?
        .query_row([], |r| r.get(0))
        .ctx(OP)?;
    tx.prepare_cached("UPDATE meta SET value = value + 1 WHERE key = 'next_task_number'")
        .ctx(OP)?
        .execute([])
        .ctx(OP)?;
    let spec = &new.spec;
    let json = serde_json::to_string(spec).map_err(|source| StoreError::Encode { op: OP, source })?;
    let items = spec.items.map(|n| to_i64(n, "items")).transpose()?;
    let state = if new.paused { TaskState::Paused } else { TaskState::Pending };
    tx.prepare_cached(
        "INSERT INTO tasks (id, name, spec, class, priority, items, retry_on_interrupt, state, created_ms, env,
                            group_name)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )
    .ctx(OP)?
    .execute(params![
        next,
        spec.name,
        json,
        spec.estimate.class,
        spec.priority,
        items,
        spec.retry_on_interrupt,
        state.as_str(),
        now,
        spec.submit_env.as_ref().map(crate::submit_env::SubmitEnv::blob),
        spec.group.as_ref().map(lardon::GroupName::as_str)
    ])
    .ctx(OP)?;
    let mut deps = Vec::new();
    for (dep, kind) in spec.dependencies() {
        let dep_i = to_i64(dep.0, "dependency id")?;
        let stored: Option<String> = tx
            .prepare_cached("SELECT state FROM tasks WHERE id = ?1 AND id < ?2")
            .ctx(OP)?
            .query_row(params![dep_i, next], |r| r.get(0))
            .optional()
            .ctx(OP)?;
        let Some(stored) = stored else { return Err(StoreError::UnknownDependency { dep }) };
        let dep_state = crate::spec::parse_state(&stored)
            .map_err(|e| StoreError::Corrupt { what: format!("task {dep} state"), detail: e.to_string() })?;
        deps.push(StoredDep { id: dep, kind, state: dep_state });
        // A task listed in both `after` and `after_any` keeps the stricter kind.
        tx.prepare_cached(
            "INSERT INTO task_deps (task_id, dep_id, kind) VALUES (?1, ?2, ?3)
             ON CONFLICT (task_id, dep_id) DO UPDATE SET kind = 'success' WHERE excluded.kind = 'success'",
        )
        .ctx(OP)?
        .execute(params![next, dep_i, kind.as_str()])
        .ctx(OP)?;
    }
    let id = TaskId(to_u64(next, "task id")?);
    push_event(tx, Some(id), EventKind::Submitted, state.as_str(), now, max_events)?;
    Ok(Inserted { id, deps })
}

impl Store {
    /// Inserts a task (one transaction) and returns its new, never-reused id.
    ///
    /// # Errors
    /// [`StoreError::UnknownDependency`] if a dependency is not a stored
    /// task; SQLite errors.
    pub fn insert_task(&mut self, new: &NewTask) -> Result<TaskId, StoreError> {
        let ids = self.insert_tasks(std::slice::from_ref(new))?;
        ids.into_iter()
            .next()
            .ok_or(StoreError::Corrupt { what: "insert task".into(), detail: "no id".into() })
    }

    /// Inserts many tasks in one transaction (all or none), in order, so a
    /// later task may depend on an earlier one of the same call.
    ///
    /// # Errors
    /// As [`Store::insert_task`]; nothing is inserted on error.
    pub fn insert_tasks(&mut self, news: &[NewTask]) -> Result<Vec<TaskId>, StoreError> {
        Ok(self.insert_tasks_resolved(news)?.into_iter().map(|t| t.id).collect())
    }

    /// [`Store::insert_tasks`], also returning each task's dependencies
    /// with their states as of the same transaction: the one place a
    /// submission's dependencies are checked and resolved.
    ///
    /// # Errors
    /// As [`Store::insert_task`]; nothing is inserted on error.
    pub fn insert_tasks_resolved(&mut self, news: &[NewTask]) -> Result<Vec<Inserted>, StoreError> {
        let now = self.now_ms();
        let max_events = self.max_events;
        let tx = Unit::begin(&self.conn).ctx("begin insert")?;
        let inserted =
            news.iter().map(|n| insert_one(&tx, n, now, max_events)).collect::<Result<Vec<_>, _>>()?;
        tx.commit().ctx("commit insert")?;
        Ok(inserted)
    }

    /// The number the next inserted task will get. Only ever grows.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn next_task_number(&self) -> Result<TaskId, StoreError> {
        let v: i64 = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'next_task_number'", [], |r| r.get(0))
            .ctx("read next task number")?;
        Ok(TaskId(to_u64(v, "next task number")?))
    }

    /// One task, if it exists.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn get_task(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1");
        Ok(query_tasks(&self.conn, &sql, [to_i64(id.0, "task id")?], "get task")?.pop())
    }

    /// Every task, by id: what the daemon loads at start.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn load_all(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks ORDER BY id");
        query_tasks(&self.conn, &sql, [], "load tasks")
    }

    /// Pending tasks in dispatch order (priority, then FIFO), via the
    /// `tasks_by_state` index.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn pending_in_order(&self, limit: Option<u32>) -> Result<Vec<TaskRecord>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'pending' ORDER BY priority DESC, id LIMIT ?1"
        );
        query_tasks(&self.conn, &sql, [limit.map_or(-1, i64::from)], "list pending tasks")
    }

    /// Tasks matching `filter`, by id.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let mut clauses = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        let placeholders = |n: usize| vec!["?"; n].join(", ");
        if !filter.ids.is_empty() {
            clauses.push(format!("id IN ({})", placeholders(filter.ids.len())));
            for id in &filter.ids {
                args.push(Value::Integer(to_i64(id.0, "task id")?));
            }
        }
        if !filter.states.is_empty() {
            clauses.push(format!("state IN ({})", placeholders(filter.states.len())));
            args.extend(filter.states.iter().map(|s| Value::Text(s.as_str().to_owned())));
        }
        if let Some(class) = &filter.class {
            clauses.push("class = ?".into());
            args.push(Value::Text(class.clone()));
        }
        if let Some(text) = &filter.name_contains {
            clauses.push("instr(name, ?) > 0".into());
            args.push(Value::Text(text.clone()));
        }
        if let Some(group) = &filter.group {
            clauses.push("group_name = ?".into());
            args.push(Value::Text(group.clone()));
        }
        let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks");
        if !clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&clauses.join(" AND "));
        }
        sql.push_str(" ORDER BY id LIMIT ?");
        args.push(Value::Integer(filter.limit.map_or(-1, i64::from)));
        query_tasks(&self.conn, &sql, params_from_iter(args), "list tasks")
    }

    /// How many tasks are in each state (states with none are omitted).
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn count_by_state(&self) -> Result<Vec<(TaskState, u64)>, StoreError> {
        const OP: &str = "count tasks";
        let mut stmt =
            self.conn.prepare_cached("SELECT state, count(*) FROM tasks GROUP BY state").ctx(OP)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(s, n)| {
                let state = crate::spec::parse_state(&s)
                    .map_err(|e| StoreError::Corrupt { what: "task state".into(), detail: e.to_string() })?;
                Ok((state, to_u64(n, "count")?))
            })
            .collect()
    }

    /// Tasks that depend on `id`, and how.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn dependents(&self, id: TaskId) -> Result<Vec<(TaskId, DepKind)>, StoreError> {
        const OP: &str = "list dependents";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT task_id, kind FROM task_deps WHERE dep_id = ?1 ORDER BY task_id")
            .ctx(OP)?;
        let rows = stmt
            .query_map([to_i64(id.0, "task id")?], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(t, k)| {
                Ok((TaskId(to_u64(t, "task id")?), if k == "end" { DepKind::End } else { DepKind::Success }))
            })
            .collect()
    }

    /// Removes a terminal task with its events (its number is not reused).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::NotTerminal`]; SQLite errors.
    pub fn remove_task(&mut self, id: TaskId) -> Result<(), StoreError> {
        let tx = Unit::begin(&self.conn).ctx("begin remove")?;
        let state: Option<String> = tx
            .query_row("SELECT state FROM tasks WHERE id = ?1", [to_i64(id.0, "task id")?], |r| r.get(0))
            .optional()
            .ctx("remove task")?;
        let state: TaskState = crate::spec::parse_state(&state.ok_or(StoreError::NotFound(id))?)
            .map_err(|e| StoreError::Corrupt { what: format!("task {id} state"), detail: e.to_string() })?;
        if !state.is_terminal() {
            return Err(StoreError::NotTerminal { id, state });
        }
        tx.execute("DELETE FROM tasks WHERE id = ?1", [to_i64(id.0, "task id")?]).ctx("remove task")?;
        tx.commit().ctx("commit remove")
    }

    /// Removes every task in one of `states` (terminal ones only; empty means
    /// all terminal states) in one transaction; returns their ids.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn clean(&mut self, states: &[TaskState]) -> Result<Vec<TaskId>, StoreError> {
        const OP: &str = "clean tasks";
        let wanted: Vec<Value> = crate::spec::STATES
            .into_iter()
            .filter(|s| s.is_terminal() && (states.is_empty() || states.contains(s)))
            .map(|s| Value::Text(s.as_str().to_owned()))
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let sql =
            format!("DELETE FROM tasks WHERE state IN ({}) RETURNING id", vec!["?"; wanted.len()].join(", "));
        let tx = Unit::begin(&self.conn).ctx("begin clean")?;
        let mut ids = {
            let mut stmt = tx.prepare(&sql).ctx(OP)?;
            stmt.query_map(params_from_iter(wanted), |r| r.get::<_, i64>(0))
                .ctx(OP)?
                .collect::<Result<Vec<_>, _>>()
                .ctx(OP)?
        };
        tx.commit().ctx("commit clean")?;
        ids.sort_unstable();
        ids.into_iter().map(|i| Ok(TaskId(to_u64(i, "task id")?))).collect()
    }
}
