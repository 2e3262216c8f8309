from django.contrib.auth import views as auth_views
from django.urls import path

from diagnosis import api, evidence_views, history_views, review_views, views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", history_views.kernel_list, name="kernel-list"),
    path("kernels/new/", views.kernel_upload, name="kernel-upload"),
    path("kernels/<int:pk>/", history_views.kernel_detail, name="kernel-detail"),
    path("kernels/<int:pk>/upload/", views.version_upload, name="version-upload"),
    path("versions/<int:pk>/", views.version_detail, name="version-detail"),
    path("versions/<int:pk>/source.py", api.version_source, name="version-source"),
    path("versions/<int:pk>/runs/", review_views.version_run, name="version-run"),
    path("runs/", history_views.run_list, name="run-list"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/report.json", api.run_report, name="run-report"),
    path("findings/", history_views.finding_list, name="finding-list"),
    path("runs/<int:pk>/evidence/", evidence_views.run_evidence, name="run-evidence"),
    path("runs/<int:pk>/passes/", evidence_views.run_passes, name="run-passes"),
    path("runs/<int:pk>/profile/", evidence_views.run_profile, name="run-profile"),
    path("artefacts/<int:pk>/", views.artefact_detail, name="artefact-detail"),
    path("artefacts/<int:pk>/raw/", views.artefact_raw, name="artefact-raw"),
    path("proposals/", history_views.proposal_list, name="proposal-list"),
    path("proposals/<int:pk>/", review_views.proposal_detail, name="proposal-detail"),
    path("proposals/<int:pk>/decide/", review_views.proposal_decide, name="proposal-decide"),
    path("reviews/", review_views.review_queue, name="review-queue"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<int:pk>/patterns/", history_views.team_patterns, name="team-patterns"),
]
