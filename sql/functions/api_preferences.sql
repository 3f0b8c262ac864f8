-- api_preferences.sql — crier.api_preferences: a person's stored preferences
-- (crier.preferences) and settings (crier.recipient_settings) as one JSON
-- document, {"user", "preferences": [{"event_type", "channel", "enabled"}],
-- "settings": {"time_zone", "locale", "quiet_hours"}} (GET /v1/preferences;
-- crier.api_set_preferences answers it after a change).
CREATE OR REPLACE FUNCTION crier.api_preferences(p_tenant text, p_recipient_id text) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'user', p_recipient_id,
        'preferences', (
            SELECT coalesce(json_agg(json_build_object('event_type', p.event_type, 'channel', p.channel,
                                                       'enabled', p.enabled)
                                     ORDER BY p.event_type COLLATE "C", p.channel COLLATE "C"), '[]'::json)
            FROM crier.preferences p
            WHERE p.tenant = p_tenant AND p.recipient_id = p_recipient_id),
        'settings', (
            SELECT json_build_object('time_zone', s.time_zone, 'locale', s.locale, 'quiet_hours', s.quiet_hours)
            FROM (SELECT 1) one
            LEFT JOIN crier.recipient_settings s ON s.tenant = p_tenant AND s.recipient_id = p_recipient_id))
$$;
