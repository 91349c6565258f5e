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
    /// A holder without record is judged as if its lock carried no ticket (the defect that
    /// `_TxK` on the lock fixed: an older holder rolled back after the grace).
    UnrecordedJudgedWithoutTicket,
    /// The tombstone of a holder judged without record lands although the holder has created its
    /// record since (not conditional on the record's absence).
    TombstoneOverRecord,
    /// The tombstone of a holder judged without record lands although the wounder was rolled back
    /// since it judged (found by this model: a resumed wounder whose transaction a takeover
    /// rolled back tombstoned the oldest pending transaction).
    TombstoneIgnoresWounder,
    /// A contender waits with a holder whose ticket equals its own when that holder records a wait
    /// for an older transaction (as for a younger holder). Two tied transactions that recorded a
    /// wait for a transaction since finished wait with each other for ever (found by this model
    /// with tickets taken at begin and clock tickets).
    WaitsWithTiedHolder,
    /// A holder without record whose lock carries a ticket equal to the contender's is tombstoned
    /// after its grace (`judge_unrecorded` taking a tie for younger; found by this model: with
    /// clock tickets, the oldest pending transaction rolled back).
    TombstonesTiedHolder,
    /// A lock carries the ticket its handle proposed rather than the one the handle's record
    /// holds (another handle of the transaction recorded its own first): a contender judging the
    /// holder by its lock would judge another transaction than the record describes.
    LockCarriesProposedTicket,
}
