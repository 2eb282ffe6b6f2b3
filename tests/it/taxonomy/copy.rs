//! The German copy of the spec's "Messages for final errors" table, written
//! out here so a wrong lookup in the runtime cannot pass by construction.

pub const MSG_CONNECTION: &str =
    "Die KI-Dienste sind gerade nicht erreichbar. Bitte in Kürze erneut versuchen.";
pub const MSG_CLIENT_CONTRACT: &str =
    "Interner Fehler bei der Anfrage an die KI-Dienste. Das Team wurde benachrichtigt.";
pub const MSG_AUTH: &str =
    "Die Anmeldung bei den KI-Diensten ist fehlgeschlagen. Bitte später erneut versuchen.";
pub const MSG_ADMIN_GATE: &str = "Diese Aktion erfordert eine Freigabe durch den Betrieb.";
pub const MSG_BUDGET: &str = "KI pausiert";
pub const MSG_NOT_FOUND: &str = "Der angeforderte Eintrag wurde nicht gefunden.";
pub const MSG_TOO_LARGE: &str = "Die Datenmenge ist zu groß für eine Anfrage.";
pub const MSG_VALIDATION: &str =
    "Die Anfrage wurde von den KI-Diensten abgelehnt. Das Team wurde benachrichtigt.";
pub const MSG_RATE_LIMITED: &str =
    "Gerade sind zu viele Anfragen unterwegs. Bitte einen Moment warten und erneut versuchen.";
pub const MSG_BAD_GATEWAY: &str = "Die KI-Dienste haben nicht geantwortet. Bitte erneut versuchen.";
pub const MSG_DARK: &str = "Diese Funktion ist derzeit nicht verfügbar.";
pub const MSG_SAFETY: &str =
    "Die Anfrage wurde vorübergehend nicht angenommen. Bitte später erneut versuchen.";
pub const MSG_BACKPRESSURE: &str =
    "Die KI-Dienste sind ausgelastet; die Verarbeitung wird später fortgesetzt.";
pub const MSG_AMBIGUOUS: &str =
    "Die KI-Dienste sind vorübergehend nicht verfügbar. Bitte später erneut versuchen.";
pub const MSG_DEADLINE: &str = "Die Anfrage hat zu lange gedauert. Bitte erneut versuchen.";
pub const MSG_CIRCUIT_OPEN: &str = "Wird gerade aktualisiert";
pub const MSG_INVALID_SCOPE: &str =
    "Interner Fehler: ungültiger Mandant oder ungültige Kennung. Das Team wurde benachrichtigt.";
pub const MSG_SERVER_ERROR: &str =
    "Bei den KI-Diensten ist ein Fehler aufgetreten. Bitte erneut versuchen.";
pub const MSG_DECODE: &str =
    "Die Antwort der KI-Dienste war unverständlich. Das Team wurde benachrichtigt.";
pub const MSG_CLIENT_ERROR: &str = "Die Anfrage konnte nicht verarbeitet werden.";
/// A non-idempotent call whose outcome is unknown: never „erneut versuchen“.
pub const MSG_UNKNOWN: &str = "Ob der Vorgang ausgeführt wurde, ist unklar. Bitte zuerst den aktuellen Stand prüfen, bevor Sie es erneut versuchen.";
