-- api_tenant_secret.sql — crier.api_tenant_secret: the tenant's secret (it signs the
-- tenant's user tokens and cursors), created on first use.
CREATE OR REPLACE FUNCTION crier.api_tenant_secret(p_tenant text) RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
    v_secret bytea;
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR length(p_tenant) > 200 THEN
        RAISE EXCEPTION 'crier.api_tenant_secret: tenant must be a non-empty string of at most 200 characters'
            USING ERRCODE = '22023';
    END IF;
    SELECT secret INTO v_secret FROM crier.api_tenants WHERE tenant = p_tenant;
    IF v_secret IS NULL THEN
        INSERT INTO crier.api_tenants (tenant) VALUES (p_tenant) ON CONFLICT DO NOTHING;
        SELECT secret INTO v_secret FROM crier.api_tenants WHERE tenant = p_tenant;
    END IF;
    RETURN v_secret;
END;
$$;
