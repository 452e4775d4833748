//! The protobuf-decoding fuzz harness, shared by `fuzz/fuzz_targets/proto.rs`
//! (cargo-fuzz, nightly) and a unit test here, so that the harness compiles
//! and runs on stable even where no nightly toolchain is installed.

use prost::Message;

use crate::pb;

/// Decodes `bytes` as every request a daemon (or the broker's KEDA
/// scaler) accepts; whatever decodes must
/// encode and decode again to the same message. Never panics on any input
/// (a panic is the fuzzer's finding).
pub fn decode_requests(bytes: &[u8]) {
    round_trip::<pb::SubmitRequest>(bytes);
    round_trip::<pb::ListRequest>(bytes);
    round_trip::<pb::CancelRequest>(bytes);
    round_trip::<pb::RestartRequest>(bytes);
    round_trip::<pb::WaitRequest>(bytes);
    round_trip::<pb::LogRequest>(bytes);
    round_trip::<pb::SetPolicyRequest>(bytes);
    round_trip::<pb::ProgressRequest>(bytes);
    round_trip::<pb::ScratchAddRequest>(bytes);
    round_trip::<pb::Task>(bytes);
    // What a broker accepts from its peers (their validation is
    // lardon-cluster-core's `wire`, with its own property test).
    round_trip::<crate::cluster::AgentMessage>(bytes);
    round_trip::<crate::cluster::SubmitMessage>(bytes);
    round_trip::<crate::cluster::BrokerToAgent>(bytes);
    round_trip::<crate::cluster::SubmitReply>(bytes);
    round_trip::<crate::keda::ScaledObjectRef>(bytes);
    round_trip::<crate::keda::GetMetricsRequest>(bytes);
}

fn round_trip<M: Message + Default + PartialEq>(bytes: &[u8]) {
    if let Ok(msg) = M::decode(bytes) {
        let again = M::decode(msg.encode_to_vec().as_slice());
        assert!(again.as_ref() == Ok(&msg), "a decoded message does not survive re-encoding");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness on a few seeds: empty, a real request, truncated and
    /// corrupted copies of it.
    #[test]
    fn harness_runs_on_seeds() {
        let spec = pb::TaskSpec { argv: vec!["true".into()], ..Default::default() };
        let real = pb::SubmitRequest { spec: Some(spec), paused: true, id_only: false }.encode_to_vec();
        decode_requests(&[]);
        decode_requests(&real);
        for cut in 0..real.len() {
            decode_requests(&real[..cut]);
            let mut bad = real.clone();
            bad[cut] ^= 0xff;
            decode_requests(&bad);
        }
    }
}
