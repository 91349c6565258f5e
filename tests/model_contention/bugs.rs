//! Deliberate bugs of the contention model, each shown to be caught by the checker.

/// Deliberate bugs, to show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bug {
    /// The bug the outside review found: `from_record` ignores the record's ticket, and at its
    /// first contention the resumed handle takes a fresh ticket and contends with it, although
    /// the record (`if_not_exists`) keeps the old one.
    ResumeTakesFreshTicket,
    /// A handle contends with the ticket it took even when its record already had another one
    /// (recorded first by another handle of the same transaction).
    KeepsOwnTicket,
    /// The wound decides the victim whatever happened since the judgement (`resolve` calling
    /// `rollback_transaction(owner)`, before the wound's conditions).
    UnconditionalWound,
    /// The wound without the check that the wounder's own record is still pending.
    WoundIgnoresWounder,
    /// The wound without the ticket condition (version only, as if a ticket write changed it).
    WoundIgnoresTicket,
    /// The takeover without the `_TxD` condition (version only).
    TakeoverIgnoresTouch,
    /// An equal ticket counts as older (wait if `theirs <= mine`): two transactions with tied clock
    /// tickets wait for each other.
    WaitsOnTie,
    /// The candidate rule ([`super::judge`]) waits also for a younger holder that records a wait.
    WaitsForRunningThatWaits,
    /// The candidate rule waits also for a holder with an equal ticket.
    WaitsForRunningTie,
    /// The candidate rule waits also for a younger holder that records a wait for a transaction
    /// younger than the contender (found deadlocking in the three-item ring with crashes).
    WaitsForRunningThatWaitsYounger,
}
