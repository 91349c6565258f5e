//! Distributed locks on DynamoDB: a FIFO ticket queue lock and lease locks with fencing tokens.
