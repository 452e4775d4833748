//! The host sample after a task end: a scan that follows an end reuses a
//! snapshot younger than `END_SAMPLE_AGE` (a burst of ends shares one
//! sample) and asks to look again once it is that old; an older one, or a
//! `resources_changed`, is sampled anew.

use super::super::dispatch::{END_SAMPLE_AGE, scan, snapshot};
use super::*;

/// To see it fail, make a task end force a fresh sample again (take
/// `task_ended` into `changed` in `dispatch::scan`): the first scan after
/// the end calls the probe.
#[test]
fn ends_within_the_sample_age_share_one_sample_and_an_older_one_is_retaken() {
    let r = rig();
    let inner = &r.queue.inner;
    eventually("the dispatcher sleeps untimed", || inner.dispatch.asleep() == Some(false));
    snapshot(inner, true).unwrap();
    let calls = r.probe.calls();

    inner.lock().task_ended = true;
    let after_end = scan(inner, false, &mut Vec::new()).unwrap();
    assert_eq!(r.probe.calls(), calls, "a snapshot younger than END_SAMPLE_AGE is reused after an end");
    assert_eq!(after_end.resample_in, Some(END_SAMPLE_AGE), "and looked at again once it is that old");

    r.clock.advance(END_SAMPLE_AGE);
    inner.lock().task_ended = true;
    let later = scan(inner, false, &mut Vec::new()).unwrap();
    assert_eq!(r.probe.calls(), calls + 1, "an END_SAMPLE_AGE-old snapshot is retaken after an end");
    assert_eq!(later.resample_in, None, "a fresh sample needs no second look");

    r.clock.advance(END_SAMPLE_AGE);
    scan(inner, false, &mut Vec::new()).unwrap();
    assert_eq!(r.probe.calls(), calls + 1, "without an end, the sample interval applies");

    inner.lock().dispatcher_wake = true;
    scan(inner, false, &mut Vec::new()).unwrap();
    assert_eq!(r.probe.calls(), calls + 2, "a change outside the Governor's view is sampled at once");
}
