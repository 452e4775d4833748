//! The core's side of a submission: an answer kept from before, the
//! result cache's pre-route hooks, learned estimates, the shapes' hand-back,
//! then the router.

use lardon_proto::cluster as pb;
use tracing::{error, info};

use super::Core;
use super::apply::reply;
use crate::cache::hooks::{HookVerdict, PreRoute};
use crate::cache::key::ActionKey;
use lardon_cluster_core::SubmitterId;
use lardon_cluster_core::learned::class_of;
use lardon_cluster_core::wire::Job;
use lardon_cluster_core::{Delivery, Event, Outcome, Submitted, TaskId, TaskPlace};

impl Core {
    pub(super) fn submit(&mut self, submitter: SubmitterId, job: Job) {
        let id = job.request.id.clone();
        match self.store.finished(id.as_str()) {
            Ok(Some(reply)) => return self.to_submitter(&submitter, reply),
            Ok(None) => {}
            Err(e) => error!("{e}"),
        }
        let spec = job.spec.clone();
        if spec.cacheable
            && let Some((_, chain)) = &self.cache
        {
            let key = action_key(&job.request.capability, &spec);
            let verdict = chain.check(&PreRoute { cacheable: Some(key) }, std::time::Instant::now());
            // A hit whose output blobs were evicted meanwhile is a miss: the
            // submitter could not fetch them.
            let hit = matches!(&verdict, Some((_, HookVerdict::Intercept(r))) if self.outputs_held(r));
            if hit {
                self.counters.cache_hits += 1;
            } else {
                self.counters.cache_misses += 1;
            }
            match verdict {
                Some((_, HookVerdict::Intercept(result))) if hit => {
                    let ended = pb::TaskEnded {
                        success: true,
                        exit_code: Some(result.exit_code),
                        reason: String::new(),
                        stdout: result.stdout_raw,
                        stderr: result.stderr_raw,
                        outputs: result
                            .output_files
                            .iter()
                            .map(|f| pb::OutputFile {
                                path: f.path.clone(),
                                digest: f.digest.as_ref().map(lardon_submit::blobs::to_pb),
                            })
                            .collect(),
                        ..Default::default()
                    };
                    let reply = reply(&id, Delivery::Done(Outcome::Succeeded), Some(ended));
                    if let Err(e) = self.store.finish(id.as_str(), submitter.as_str(), &reply) {
                        error!("{e}");
                    }
                    return self.to_submitter(&submitter, reply);
                }
                Some((hook, HookVerdict::Reject(why))) => {
                    let reply = reply(&id, Delivery::RunLocally(format!("{hook}: {why}")), None);
                    return self.to_submitter(&submitter, reply);
                }
                Some((_, HookVerdict::Pass | HookVerdict::Intercept(_))) | None => {}
            }
        }
        // Its inputs were uploaded before it was sent; one evicted since
        // could never be fetched by an agent.
        if let Some(reason) = self.inputs_missing(&spec) {
            info!("task {id}: {reason}");
            return self.to_submitter(&submitter, reply(&id, Delivery::RunLocally(reason), None));
        }
        let mut request = job.request;
        // What its class took before beats what the submitter guessed.
        let class = class_of(&request.capability, &spec);
        if let Some(learned) = self.learned.estimate(&class).filter(|e| !e.duration.is_zero()) {
            request.duration_ms = Some(u64::try_from(learned.duration.as_millis()).unwrap_or(u64::MAX));
        }
        // Provisionable, but no shape could ever hold it and no agent here
        // could run it: waiting would only end at its deadline.
        if let Some(reason) = self.unfit(&request.capability, &spec, request.duration_ms) {
            info!("task {id}: no executor: {reason}");
            let delivery = Delivery::NoShapeFits(reason);
            self.count(&delivery);
            return self.to_submitter(&submitter, reply(&id, delivery, None));
        }
        let (submitted, events) = self.router.submit(request);
        if submitted == Submitted::Queued {
            if let Err(e) = self.store.insert(submitter.as_str(), &spec) {
                error!("{e}");
            }
            self.arm(&id, spec.deadline_unix_ms);
            self.specs.insert(id.clone(), (submitter.clone(), spec));
        }
        if submitted == Submitted::AlreadyFinished {
            // Remembered by the router but no longer by the store.
            let reason = "answered before; the answer is no longer kept".to_owned();
            let reply = reply(&id, Delivery::RunLocally(reason), None);
            return self.to_submitter(&submitter, reply);
        }
        self.apply(events, std::slice::from_ref(&id), None);
    }

    /// Why `spec` cannot run at an agent: an input blob the CAS does not
    /// hold (evicted, or lost with a cache that was not kept on disk).
    /// `None` when it holds them all, or when the broker has no cache.
    pub(super) fn inputs_missing(&self, spec: &pb::TaskSpec) -> Option<String> {
        let (cache, _) = self.cache.as_ref()?;
        let digests: Vec<_> =
            spec.inputs.iter().filter_map(|f| f.digest.as_ref()).map(lardon_submit::blobs::from_pb).collect();
        let missing = cache.cas.missing(&digests);
        let first = missing.first()?;
        let path = spec
            .inputs
            .iter()
            .find(|f| f.digest.as_ref().is_some_and(|d| d.hash == first.hash))
            .map_or("", |f| f.path.as_str());
        Some(format!(
            "its input `{path}` (blob {}) is no longer in the broker's cache: run it at its submitter",
            first.hash
        ))
    }

    /// After a restart: every queued task whose inputs the cache no longer
    /// holds is handed back to its submitter to run there (the router
    /// forgets it as a cancel would; the submitter is told to run it
    /// locally), never sent to an agent to fail on a missing blob.
    pub(super) fn hand_back_queued_without_inputs(&mut self) {
        let gone: Vec<(TaskId, String)> = self
            .specs
            .iter()
            .filter(|(id, _)| matches!(self.router.place(id), Some(TaskPlace::Queued { .. })))
            .filter_map(|(id, (_, spec))| self.inputs_missing(spec).map(|why| (id.clone(), why)))
            .collect();
        for (id, why) in gone {
            info!("task {id}: {why}");
            let events = self
                .router
                .cancel(&id)
                .into_iter()
                .map(|event| match event {
                    Event::Deliver { submitter, task, .. } if task == id => {
                        Event::Deliver { submitter, task, delivery: Delivery::RunLocally(why.clone()) }
                    }
                    other => other,
                })
                .collect();
            self.apply(events, std::slice::from_ref(&id), None);
        }
    }

    /// Whether the CAS still holds every output file of a cached result.
    pub(super) fn outputs_held(&self, result: &crate::cache::reapi::ActionResult) -> bool {
        let Some((cache, _)) = &self.cache else { return false };
        let digests: Vec<_> = result.output_files.iter().filter_map(|f| f.digest.clone()).collect();
        digests.len() == result.output_files.len() && cache.cas.missing(&digests).is_empty()
    }
}

/// The cache key of a cacheable task: its capability, argv, every
/// variable it sets (the submitter sends only the ones that matter), its
/// input files' paths and digests, and its declared outputs.
pub(crate) fn action_key(capability: &crate::Capability, spec: &pb::TaskSpec) -> ActionKey {
    let env: Vec<(String, String)> = spec.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
    let names: Vec<&str> = spec.env.iter().map(|v| v.name.as_str()).collect();
    let inputs: Vec<crate::cache::key::InputEntry> = spec
        .inputs
        .iter()
        .map(|f| crate::cache::key::InputEntry {
            path: f.path.clone(),
            digest: f.digest.as_ref().map(lardon_submit::blobs::from_pb).unwrap_or_default(),
            executable: f.executable,
        })
        .collect();
    ActionKey::with_files(capability, &spec.argv, &env, &names, &inputs, &spec.outputs)
}
