//! Groups, members and collectives (waiting for the runtime API).
