//! `GroupSet`, `GroupList` and `GroupRemove`: a group's limits and what
//! its tasks are doing.

use lardon_proto::pb;
use tonic::Status;

use super::convert::state_to_pb;
use super::status;
use crate::engine::{Engine, GroupView};

fn name_arg(text: &str) -> Result<lardon::GroupName, Status> {
    super::convert::group_arg("name", text)?
        .ok_or_else(|| Status::invalid_argument("name: the group name is empty"))
}

fn info(v: GroupView) -> pb::GroupInfo {
    let limits = v.limits.unwrap_or_default();
    pb::GroupInfo {
        name: v.name,
        has_limits: v.limits.is_some(),
        limits: Some(pb::GroupLimits {
            max_running: limits.max_running,
            memory: limits.memory,
            cpu_millis: limits.cpu_millis.map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
        }),
        counts: v
            .counts
            .into_iter()
            .map(|(state, count)| pb::GroupStateCount { state: state_to_pb(state) as i32, count })
            .collect(),
        running: v.held.running,
        memory: v.held.memory,
        cpu_millis: u32::try_from(v.held.cpu_millis).unwrap_or(u32::MAX),
    }
}

pub(super) fn set(engine: &Engine, req: pb::GroupSetRequest) -> Result<pb::GroupInfo, Status> {
    let name = name_arg(&req.name)?;
    let l = req.limits.unwrap_or_default();
    let limits = lardon::GroupLimits {
        max_running: l.max_running,
        memory: l.memory,
        cpu_millis: l.cpu_millis.map(u64::from),
    };
    engine.set_group(&name, limits).map(info).map_err(status)
}

pub(super) fn list(engine: &Engine, _req: pb::GroupListRequest) -> Result<pb::GroupListResponse, Status> {
    let groups = engine.groups().map_err(status)?;
    Ok(pb::GroupListResponse { groups: groups.into_iter().map(info).collect() })
}

pub(super) fn remove(
    engine: &Engine,
    req: pb::GroupRemoveRequest,
) -> Result<pb::GroupRemoveResponse, Status> {
    let name = name_arg(&req.name)?;
    let removed = engine.remove_group(&name).map_err(status)?;
    Ok(pb::GroupRemoveResponse { removed })
}
