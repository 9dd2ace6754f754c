// The agent's states and what moves it between them. The transitions themselves are all in
// agent.cc (Agent::Enter logs each one at info level); this header is the map.
//
// waiting ──round started──▶ running ──all exited 0──▶ (coordinator's verdict) ──▶ finished
//    ▲                         │  │
//    │       local failure,    │  │ local failure (no rank can save), restart requested,
//    │       a rank can save   │  │ job finished (failed), signal
//    │                         ▼  │
//    │              holding-for-save
//    │   stop ordered / save deadline / restart / job over
//    │                         │  │
//    │                         ▼  ▼
//    │          survivor-grace (msrun TTP) ──survivors exited / grace over──┐
//    │                         │                                             ▼
//    └──report stopped────── stopping ◀─────────────────────────────────────┘
//                              │ every process exited and the job is over, or a signal
//                              ▼
//                           finished (exit code 0, 1, 75 or the signal's)
//
// waiting goes straight to `finished` when the job ends with no workers running (the
// coordinator's verdict, a round whose logs cannot be prepared, a set-up error in Start()).
// Any state goes to `finished` when a pre-flight check excludes this node (exit code
// kExitExcluded; live workers are killed). A second signal while stopping kills at once.
//
// Events (all on the loop): Coordinator::Listener calls (round started, restart requested,
// job finished, save order, check order, excluded), a worker's exit, the whole group's exit,
// a forwarded signal, the hang detector's verdict, the save deadline and the grace timer.
#pragma once

namespace ftrun::launcher {

enum class AgentState {
  kWaiting,         // no workers: joining, or waiting for the next round
  kRunning,         // this round's workers run
  kHoldingForSave,  // a local rank failed; the survivors stay for the fault-time save
  kSurvivorGrace,   // stopping, but the survivors may finish their own save and exit first
  kStopping,        // stop signals sent; waiting for every process to exit
  kFinished,        // the exit code is known
};

// What the agent does once the stopping group has exited.
enum class AfterStop { kNothing, kReportStopped, kFinish };

constexpr const char* StateName(AgentState s) {
  constexpr const char* kNames[] = {"waiting",        "running",  "holding-for-save",
                                    "survivor-grace", "stopping", "finished"};
  return kNames[static_cast<int>(s)];
}

// The round's workers are (still) the live attempt: their failures count, hangs are watched.
constexpr bool WorkersLive(AgentState s) {
  return s == AgentState::kRunning || s == AgentState::kHoldingForSave;
}
constexpr bool Stopping(AgentState s) {
  return s == AgentState::kSurvivorGrace || s == AgentState::kStopping;
}

}  // namespace ftrun::launcher
